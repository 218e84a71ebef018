//! The in-sync replica set on real servers: which replicas the master counts a write on, and
//! which replicas make themselves unpromotable.
//!
//! - A replica joins once it is online and caught up, and keeps the operator's
//!   `replica-priority` while the master lists it.
//! - A member that went silent — killed, or cut off while it keeps running — is dropped by the
//!   master only after its last promotability lease ended plus `lock.insync-drop-delay-ms`;
//!   until then a write does not count (`LOCK.INSYNC`), after it counts without it.
//! - A replica that hears nothing from its master for `lock.insync-timeout-ms` (cut off, or
//!   just restarted) sets `replica-priority 0` on its own, and gets the operator's priority back
//!   once listed again — across `CONFIG REWRITE` and a restart (`lock.replica-priority`).
//! - Clients cannot forge `LOCK.PROMOTABLE`; bad arguments and settings are refused.
//! - With Sentinel: a preferred replica cut off from the master is not promoted, and every
//!   write the set counted is on the replica that is.
//!
//! The servers run with a short `lock.insync-timeout-ms` (1 s) so that the whole file runs in
//! about half a minute.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::proxy::LinkProxy;
use common::sentinel::replica_fields;
use common::{
    InSync, Reply, Server, call, error, free_port, info_field, insync, lock_info, wait_until,
};
use redis::{Connection, Value};

/// `lock.insync-timeout-ms` of most tests: a replica that hears nothing from its master for
/// this long is unpromotable, and so is each lease the master gives. Two heartbeats, so that a
/// replica that keeps up shows Sentinel its priority without a gap between two lists.
const TIMEOUT_MS: u64 = 2_000;

/// Module arguments of most tests: a 2 s timeout and a 0.5 s drop delay, so that a member that
/// went silent is dropped about 3 s later.
const FAST: &[&str] = &["insync-timeout-ms", "2000", "insync-drop-delay-ms", "500"];

/// One synced round trip, as a client can make it itself: `LOCK.ACQUIRE key owner 60000 NOSYNC`,
/// `LOCK.INSYNC` (→ `before`), `WAIT replicas timeout_ms`, `LOCK.INSYNC` (→ `after`). Returns
/// the token and the two replies.
fn synced_acquire(
    con: &mut Connection,
    key: &str,
    owner: &str,
    replicas: u64,
    timeout_ms: u64,
) -> (i64, InSync, InSync) {
    let (token, before, _, after): (Option<i64>, Reply, i64, Reply) = redis::pipe()
        .cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(60_000)
        .arg("NOSYNC")
        .cmd("LOCK.INSYNC")
        .cmd("WAIT")
        .arg(replicas)
        .arg(timeout_ms)
        .cmd("LOCK.INSYNC")
        .query(con)
        .expect("synced round trip");
    (
        token.expect("a fresh key is free"),
        before.into(),
        after.into(),
    )
}

/// Whether a write covered by `before` counts by `after`: the set is large enough and every
/// member acknowledged it.
fn counts(before: &InSync, after: &InSync) -> bool {
    after.members >= after.required && after.acked >= before.offset
}

/// How the master names `server` in its set: `ip:port`.
fn id(server: &Server) -> String {
    format!("127.0.0.1:{}", server.port)
}

/// A field of `INFO lock`'s `lock_insync` section (`role` → `lock_insync_role`).
fn insync_info(con: &mut Connection, field: &str) -> Option<String> {
    info_field(con, "lock", &format!("lock_insync_{field}"))
}

/// The master's members, as `INFO lock` lists them, sorted; `None` while the server does not
/// report the master's role.
fn members(master: &mut Connection) -> Option<Vec<String>> {
    let listed = insync_info(master, "members")?;
    let mut members: Vec<String> = listed
        .split(',')
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect();
    members.sort();
    Some(members)
}

/// Waits until the master's set is exactly `expected`.
fn wait_for_members(master: &mut Connection, expected: &[&Server]) {
    let mut wanted: Vec<String> = expected.iter().map(|server| id(server)).collect();
    wanted.sort();
    wait_until(&format!("the master's set is {wanted:?}"), || {
        members(master).as_ref() == Some(&wanted)
    });
}

/// `CONFIG GET replica-priority`.
fn priority(con: &mut Connection) -> i64 {
    config_integer(con, "replica-priority")
}

fn config_integer(con: &mut Connection, name: &str) -> i64 {
    let (_, value): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    value.parse().expect("an integer setting")
}

/// `lock_insync_promotable:1` on a replica.
fn promotable(con: &mut Connection) -> bool {
    insync_info(con, "promotable").as_deref() == Some("1")
}

/// Waits until the replica says it may be promoted and has the priority `operator` gave it.
fn wait_promotable(replica: &mut Connection, operator: i64) {
    wait_until(&format!("promotable with priority {operator}"), || {
        promotable(replica) && priority(replica) == operator
    });
}

/// Waits until the replica made itself unpromotable: `replica-priority 0`.
fn wait_unpromotable(replica: &mut Connection) {
    wait_until("unpromotable, replica-priority 0", || {
        !promotable(replica) && priority(replica) == 0
    });
}

/// Polls `condition` every 20 ms until it holds and returns how long after `since` that was;
/// panics after `within`.
fn time_until(
    what: &str,
    since: Instant,
    within: Duration,
    mut condition: impl FnMut() -> bool,
) -> Duration {
    while !condition() {
        assert!(since.elapsed() < within, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(20));
    }
    since.elapsed()
}

/// A lone master requires no member; two replicas join once caught up, the master lists both
/// (`INFO lock`, `LOCK.INSYNC`), each is promotable with the priority its operator gave it, and
/// a write counts once both have it.
#[test]
fn caught_up_replicas_join_and_keep_the_operators_priority() {
    let master = Server::with_module_args(FAST, &[]);
    let mut m = master.client();
    assert_eq!(insync_info(&mut m, "role").as_deref(), Some("master"));
    // A server that was never part of a replication group requires no member.
    let alone = insync(&mut m);
    assert_eq!(
        (alone.members, alone.required, alone.acked),
        (0, 0, alone.offset),
        "{alone:?}"
    );

    let preferred = Server::with_module_args(FAST, &["--replica-priority", "10"]);
    let plain = Server::with_module_args(FAST, &[]);
    preferred.replicate(&master);
    plain.replicate(&master);
    wait_for_members(&mut m, &[&preferred, &plain]);
    assert_eq!(insync_info(&mut m, "role").as_deref(), Some("master"));
    assert_eq!(insync_info(&mut m, "replicas").as_deref(), Some("2"));
    assert_eq!(insync_info(&mut m, "required").as_deref(), Some("1"));

    for (replica, operator) in [(&preferred, 10), (&plain, 100)] {
        let mut r = replica.client();
        wait_promotable(&mut r, operator);
        assert_eq!(insync_info(&mut r, "role").as_deref(), Some("replica"));
    }

    let now = insync(&mut m);
    assert_eq!((now.members, now.required), (2, 1), "{now:?}");
    assert_eq!(
        Some(now.replid.clone()),
        info_field(&mut m, "replication", "master_replid")
    );
    assert_eq!(
        Some(now.replid2.clone()),
        info_field(&mut m, "replication", "master_replid2")
    );
    let (_, before, after) = synced_acquire(&mut m, "job", "alice", 2, 5_000);
    assert!(
        counts(&before, &after),
        "both members have it: {before:?} {after:?}"
    );
}

/// A replica killed for good stays in the set — writes do not count without it — until its
/// last lease ended and the drop delay passed (measured: neither sooner nor much later); then a
/// write counts with the one member left.
#[test]
fn a_killed_replica_is_dropped_after_its_lease_and_the_delay_and_until_then_writes_wait_for_it() {
    // A longer drop delay than the other tests, so that the bound below says something.
    const DROP_DELAY_MS: u64 = 1_500;
    let timeout = TIMEOUT_MS.to_string();
    let args = [
        "insync-timeout-ms",
        &timeout,
        "insync-drop-delay-ms",
        "1500",
    ];
    let master = Server::with_module_args(&args, &[]);
    let keeper = Server::with_module_args(&args, &[]);
    let mut doomed = Server::with_module_args(&args, &[]);
    keeper.replicate(&master);
    doomed.replicate(&master);
    let mut m = master.client();
    wait_for_members(&mut m, &[&keeper, &doomed]);
    wait_promotable(&mut doomed.client(), 100);

    doomed.kill();
    let died = Instant::now();
    // Still a member: a write the killed replica cannot have does not count.
    let (_, before, after) = synced_acquire(&mut m, "early", "alice", 2, 300);
    assert_eq!(after.members, 2, "dropped at once: {after:?}");
    assert!(
        after.acked < before.offset && !counts(&before, &after),
        "a write counted without a member: {before:?} {after:?}"
    );

    let dropped = time_until(
        "the master drops the killed replica",
        died,
        Duration::from_secs(20),
        || insync(&mut m).members == 1,
    );
    // The master lists it no more once its connection is gone, so its last lease came with a
    // heartbeat (every second) before it died, lasted the timeout, and the master waits the
    // drop delay more.
    let earliest = Duration::from_millis(TIMEOUT_MS + DROP_DELAY_MS - 1_000);
    eprintln!("the killed replica was dropped {dropped:?} after it died");
    assert!(
        dropped >= earliest,
        "dropped {dropped:?} after it died, before {earliest:?}"
    );
    assert!(
        dropped <= Duration::from_secs(6),
        "dropped only after {dropped:?}"
    );
    assert_eq!(members(&mut m), Some(vec![id(&keeper)]));

    let (_, before, after) = synced_acquire(&mut m, "late", "bob", 1, 5_000);
    assert_eq!((after.members, after.required), (1, 1), "{after:?}");
    assert!(
        counts(&before, &after),
        "the remaining member has it: {before:?} {after:?}"
    );
}

/// A replica whose link is cut while it keeps running sets `replica-priority 0` by itself
/// within the timeout; the master drops it (no write counts with no member); once the link is
/// back it rejoins and has the operator's priority again.
#[test]
fn a_replica_cut_off_makes_itself_unpromotable_and_rejoins_with_its_priority() {
    let master = Server::with_module_args(FAST, &[]);
    let replica = Server::with_module_args(FAST, &["--replica-priority", "30"]);
    let proxy = LinkProxy::to(master.port);
    replica.replicate_through(proxy.port);
    let (mut m, mut r) = (master.client(), replica.client());
    wait_for_members(&mut m, &[&replica]);
    wait_promotable(&mut r, 30);

    proxy.cut();
    let cut = Instant::now();
    // It last heard its master at most a heartbeat before the cut, and its lease lasts the
    // timeout from then; its next look (every 200 ms) sets the priority.
    let unpromotable = time_until(
        "the cut-off replica sets replica-priority 0",
        cut,
        Duration::from_secs(10),
        || !promotable(&mut r) && priority(&mut r) == 0,
    );
    eprintln!("the cut-off replica was unpromotable {unpromotable:?} after the cut");
    assert!(
        unpromotable <= Duration::from_millis(TIMEOUT_MS + 1_000),
        "still promotable {unpromotable:?} after the cut"
    );

    wait_for_members(&mut m, &[]);
    let (_, before, after) = synced_acquire(&mut m, "alone", "alice", 1, 100);
    assert_eq!((after.members, after.required), (0, 1), "{after:?}");
    assert!(
        !counts(&before, &after),
        "a write counted with no member: {after:?}"
    );

    let _proxy = LinkProxy::at(proxy.port, master.port);
    wait_for_members(&mut m, &[&replica]);
    wait_promotable(&mut r, 30);
}

/// A replica restarted (its master out of reach for a while) is unpromotable from its start —
/// whatever its last master said before — and gets the operator's priority back only with a
/// message that lists it: when it is promotable, the master has it in its set.
#[test]
fn a_restarted_replica_is_unpromotable_until_it_rejoined() {
    let master = Server::with_module_args(FAST, &[]);
    let mut replica = Server::with_module_args(FAST, &["--replica-priority", "10"]);
    let proxy = LinkProxy::to(master.port);
    replica.replicate_through(proxy.port);
    let mut m = master.client();
    wait_for_members(&mut m, &[&replica]);
    wait_promotable(&mut replica.client(), 10);

    // Back at once, but its master out of reach for a while: what it says then is its own.
    replica.kill();
    proxy.cut();
    let through = proxy.port.to_string();
    replica.restart_with(&["--replicaof", "127.0.0.1", &through]);
    let mut r = replica.client();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(TIMEOUT_MS + 500) {
        assert_eq!(
            (promotable(&mut r), priority(&mut r)),
            (false, 0),
            "promotable {:?} after its start, its master out of reach",
            started.elapsed()
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(config_integer(&mut r, "lock.replica-priority"), 10);

    let _proxy = LinkProxy::at(proxy.port, master.port);
    // The module sets the priority in the command that makes it promotable: read in this
    // order, a priority other than 0 comes with promotability.
    wait_until("the restarted replica is promotable again", || {
        let set = priority(&mut r);
        let promoted = promotable(&mut r);
        assert!(promoted || set == 0, "priority {set} while unpromotable");
        promoted
    });
    assert!(
        members(&mut m).is_some_and(|set| set.contains(&id(&replica))),
        "promotable, but not in the master's set"
    );
    assert_eq!(priority(&mut r), 10);
}

/// A replica moved to a new master lost nothing it acknowledged — its data came whole from a
/// master by a full sync — so the new master's first list naming it gives it a lease, though
/// sent within a second of its link coming up: a new master that dies at once leaves it a
/// successor (`make chaos` at Sentinel's defaults found a group with none, its new master killed
/// within a second of the promotion). The new master is stopped right after that first list.
#[test]
fn a_replica_moved_to_a_new_master_is_promotable_from_its_first_list() {
    let mut old = Server::with_module_args(FAST, &[]);
    let new = Server::with_module_args(FAST, &[]);
    let moved = Server::with_module_args(FAST, &[]);
    new.replicate(&old);
    moved.replicate(&old);
    wait_for_members(&mut old.client(), &[&new, &moved]);
    let mut r = moved.client();
    wait_promotable(&mut r, 100);

    old.kill();
    wait_unpromotable(&mut r);
    common::promote(&mut new.client());
    moved.replicate(&new);
    wait_until("the moved replica's link is up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    let mut n = new.client();
    let linked = insync(&mut n).offset;
    // It joins — and the new master lists it in the same turn — once it acknowledged that.
    wait_until("the moved replica joined", || {
        insync(&mut n).acked >= linked
    });
    new.signal("STOP");
    let listed = time_until(
        "the first list gives a lease",
        Instant::now(),
        Duration::from_millis(1_500),
        || promotable(&mut r),
    );
    new.signal("CONT");
    eprintln!("promotable {listed:?} after its new master listed it");
}

/// An operator's `CONFIG SET replica-priority` is the operator's even when it equals the value
/// the module had set: a 0 set on a replica outside the set stays 0 once it joins, and a later
/// value is what it keeps while promotable (both written to `lock.replica-priority`).
#[test]
fn an_operators_config_set_priority_is_kept_even_when_it_equals_the_modules() {
    let master = Server::with_module_args(FAST, &[]);
    let replica = Server::with_module_args(FAST, &[]);
    let proxy = LinkProxy::to(master.port);
    replica.replicate_through(proxy.port);
    let mut r = replica.client();
    wait_promotable(&mut r, 100);
    proxy.cut();
    wait_unpromotable(&mut r);
    call(&mut r, &["CONFIG", "SET", "replica-priority", "0"]);

    let _proxy = LinkProxy::at(proxy.port, master.port);
    wait_for_members(&mut master.client(), &[&replica]);
    wait_until("the replica is promotable", || promotable(&mut r));
    assert_eq!(priority(&mut r), 0, "the operator's 0 was lost");
    assert_eq!(config_integer(&mut r, "lock.replica-priority"), 0);

    call(&mut r, &["CONFIG", "SET", "slave-priority", "30"]);
    wait_until("lock.replica-priority follows", || {
        config_integer(&mut r, "lock.replica-priority") == 30
    });
    thread::sleep(Duration::from_millis(3 * TIMEOUT_MS));
    assert!(promotable(&mut r));
    assert_eq!(priority(&mut r), 30);
}

/// A replica started from a `redis.conf` with `replica-priority 10`, then cut off:
/// `CONFIG REWRITE` writes `replica-priority 0` and `lock.replica-priority 10`; restarted from
/// that file it starts unpromotable, and gets 10 back once it rejoined.
#[test]
fn the_operators_priority_survives_config_rewrite_and_a_restart() {
    let master = Server::with_module_args(FAST, &[]);
    let mut replica = Server::from_config(FAST, "replica-priority 10\n");
    let proxy = LinkProxy::to(master.port);
    replica.replicate_through(proxy.port);
    let (mut m, mut r) = (master.client(), replica.client());
    wait_for_members(&mut m, &[&replica]);
    wait_promotable(&mut r, 10);

    proxy.cut();
    wait_unpromotable(&mut r);
    assert_eq!(config_integer(&mut r, "lock.replica-priority"), 10);
    call(&mut r, &["CONFIG", "REWRITE"]);
    let written = std::fs::read_to_string(replica.config_path()).expect("redis.conf");
    let lines: Vec<&str> = written.lines().map(str::trim).collect();
    assert!(lines.contains(&"replica-priority 0"), "{written}");
    assert!(lines.contains(&"lock.replica-priority 10"), "{written}");
    let replicaof = format!("replicaof 127.0.0.1 {}", proxy.port);
    assert!(lines.contains(&replicaof.as_str()), "{written}");

    // Back from the file that says priority 0, its master still out of reach.
    replica.kill();
    replica.restart();
    let mut r = replica.client();
    assert_eq!((promotable(&mut r), priority(&mut r)), (false, 0));
    assert_eq!(config_integer(&mut r, "lock.replica-priority"), 10);

    let _proxy = LinkProxy::at(proxy.port, master.port);
    wait_for_members(&mut m, &[&replica]);
    wait_promotable(&mut r, 10);
}

/// Issue 54's case 3: a replica coming online takes no member's lease away. Each time one
/// replica restarts and re-attaches (a new challenge every member must answer), the other
/// member stays promotable at its priority, sampled every 10 ms throughout.
#[test]
fn a_replica_coming_online_never_leaves_a_member_unpromotable() {
    let master = Server::with_module_args(FAST, &[]);
    let member = Server::with_module_args(FAST, &[]);
    let mut restarted = Server::with_module_args(FAST, &[]);
    member.replicate(&master);
    restarted.replicate(&master);
    wait_for_members(&mut master.client(), &[&member, &restarted]);
    let mut m = member.client();
    wait_promotable(&mut m, 100);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = thread::spawn({
        let done = std::sync::Arc::clone(&done);
        move || {
            let mut lapses = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if !promotable(&mut m) || priority(&mut m) == 0 {
                    lapses += 1;
                }
                thread::sleep(Duration::from_millis(10));
            }
            lapses
        }
    });
    for _ in 0..5 {
        restarted.kill();
        restarted.restart();
        restarted.replicate(&master);
        wait_for_members(&mut master.client(), &[&member, &restarted]);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let lapses = watcher.join().expect("the watcher");
    assert_eq!(lapses, 0, "the member was unpromotable in {lapses} samples");
}

/// A promotion the module refuses is an error of its own, `-LOCKREFUSED ...`, that names why and
/// the way out; inside `MULTI` it aborts the whole transaction (`EXECABORT`), as Sentinel's
/// promotion needs. Redis 7.0 cannot tell the module whether a client is in `MULTI`, so there
/// the refusal is the unknown command that carries the same words.
#[test]
fn a_refused_promotion_is_an_error_of_its_own_and_aborts_a_transaction() {
    let master = Server::with_module_args(FAST, &[]);
    let replica = Server::with_module_args(FAST, &[]);
    replica.replicate(&master);
    let mut r = replica.client();
    let refused = error(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let version = info_field(&mut r, "server", "redis_version").unwrap_or_default();
    let expected = if version.starts_with("7.0.") {
        "ERR unknown command 'REPLICAOF NO ONE refused by the lock module: "
    } else {
        "LOCKREFUSED REPLICAOF NO ONE refused by the lock module: "
    };
    assert!(refused.starts_with(expected), "{refused}");
    assert!(
        refused.contains("CONFIG SET lock.allow-unsafe-promotion yes"),
        "{refused}"
    );
    let aborted: redis::RedisResult<Value> = redis::pipe()
        .atomic()
        .cmd("SLAVEOF")
        .arg("NO")
        .arg("ONE")
        .cmd("PING")
        .query(&mut r);
    let aborted = aborted.expect_err("the transaction is refused");
    assert_eq!(aborted.code(), Some("EXECABORT"), "{aborted}");
    assert_eq!(
        info_field(&mut r, "replication", "role").as_deref(),
        Some("slave")
    );
}

/// `LOCK.PROMOTABLE` from a client (directly or from a script) is refused and changes nothing,
/// on a master or a replica; `LOCK.INSYNC` takes no arguments and is answered by masters only;
/// out-of-range settings keep the module from loading and `CONFIG SET` refuses them.
#[test]
fn clients_cannot_forge_the_set_and_bad_input_is_refused() {
    let lone = Server::with_module_args(FAST, &[]);
    let mut con = lone.client();
    let until = (common::now_ms() + 60_000).to_string();
    let me = id(&lone);
    let forged = error(
        &mut con,
        &["LOCK.PROMOTABLE", until.as_str(), "60000", me.as_str()],
    );
    assert!(
        forged.starts_with("ERR LOCK.PROMOTABLE only carries"),
        "{forged}"
    );
    let script = format!("return redis.call('LOCK.PROMOTABLE', '{until}', '60000', '{me}')");
    let scripted = error(&mut con, &["EVAL", &script, "0"]);
    assert!(scripted.contains("clients cannot call it"), "{scripted}");
    // Nothing changed: still a server outside any replication group.
    let after = insync(&mut con);
    assert_eq!((after.members, after.required), (0, 0), "{after:?}");
    assert_eq!(insync_info(&mut con, "required").as_deref(), Some("0"));

    let arity = error(&mut con, &["LOCK.INSYNC", "extra"]);
    assert!(arity.contains("wrong number of arguments"), "{arity}");

    // A replica of a master that never answers: it never heard it may be promoted.
    let orphan = Server::with_module_args(FAST, &["--replica-priority", "10"]);
    let mut o = orphan.client();
    call(
        &mut o,
        &["REPLICAOF", "127.0.0.1", &free_port().to_string()],
    );
    wait_unpromotable(&mut o);
    let listed = id(&orphan);
    error(
        &mut o,
        &["LOCK.PROMOTABLE", until.as_str(), "60000", listed.as_str()],
    );
    thread::sleep(Duration::from_millis(500)); // a look or two at its promotability
    assert_eq!((promotable(&mut o), priority(&mut o)), (false, 0));
    assert_eq!(
        error(&mut o, &["LOCK.INSYNC"]),
        "ERR LOCK.INSYNC is answered by the master; this server is a replica"
    );

    for (name, bad) in [
        ("insync-timeout-ms", "-5"),
        ("insync-drop-delay-ms", "-1"),
        ("min-insync-replicas", "1001"),
        ("replica-priority", "-2"),
    ] {
        let log = Server::refused(&[name, bad]);
        assert!(log.contains(&format!("lock.{name}")), "{name} {bad}: {log}");
    }
    let refused = error(&mut con, &["CONFIG", "SET", "lock.insync-timeout-ms", "-5"]);
    assert!(refused.starts_with("ERR"), "{refused}");
    assert_eq!(config_integer(&mut con, "lock.insync-timeout-ms"), 2_000);
}

/// The `(slave-priority, master-link-status)` each Sentinel reports for the replica on `port`.
fn sentinel_view(
    sentinels: &[Server],
    master_name: &str,
    port: u16,
) -> Vec<Option<(String, String)>> {
    sentinels
        .iter()
        .map(|sentinel| {
            let mut fields = replica_fields(sentinel, master_name, port)?;
            Some((
                fields.remove("slave-priority")?,
                fields.remove("master-link-status")?,
            ))
        })
        .collect()
}

/// With Sentinel: the replica Sentinel would prefer (priority 10) is cut off from the master
/// but still reachable and reporting its link up; once the master dropped it, 20 locks granted
/// and counted as synced — by the client's own round trip — survive the master's death:
/// Sentinel promotes the member, which holds every one of them with the same token.
#[test]
fn sentinel_promotes_the_member_not_the_preferred_replica_that_was_cut_off() {
    preferred_replica_cut_off(|m, key| {
        let (token, before, after) = synced_acquire(m, key, "client", 1, 5_000);
        assert!(counts(&before, &after), "{key} did not count: {after:?}");
        token
    });
}

/// The same with a plain client sending one command, `LOCK.ACQUIRE key owner ttl-ms` (synced
/// by `lock.sync-writes`): a grant the stalled member cannot acknowledge is refused with
/// `NOREPLICAS` and released; after the drop, every grant it replied is on the promoted member.
#[test]
fn a_plain_clients_grants_survive_the_failover_that_follows_a_cut_off_preferred_replica() {
    preferred_replica_cut_off(|m, key| {
        let grant = |m: &mut Connection| {
            redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg("client")
                .arg(60_000)
                .query::<i64>(m)
        };
        grant(m).unwrap_or_else(|error| panic!("{key} refused: {error}"))
    });
}

/// Cuts the link of the replica Sentinel prefers, grants 20 locks with `grant` once the master
/// dropped it (a plain acquire before that must be refused), kills the master, and checks the
/// member Sentinel promotes holds them all.
fn preferred_replica_cut_off(grant: impl Fn(&mut Connection, &str) -> i64) {
    // insync-timeout-ms must outlast Sentinel's failover (down-after 1 s, then the vote); the
    // drop delay covers Sentinel's INFO period (1 s here, set below) and a second.
    let args = ["insync-timeout-ms", "6000", "insync-drop-delay-ms", "2000"];
    let mut master = Server::with_module_args(&args, &[]);
    let member = Server::with_module_args(&args, &[]);
    let preferred = Server::with_module_args(&args, &["--replica-priority", "10"]);
    let link = LinkProxy::to(master.port);
    member.replicate(&master);
    preferred.replicate_through(link.port);
    let mut m = master.client();
    wait_for_members(&mut m, &[&member, &preferred]);
    wait_promotable(&mut preferred.client(), 10);

    // failover-timeout is long: it is also how soon a Sentinel makes a replica that follows
    // another address (the proxy) follow the master's own.
    let name = "insync";
    let config = format!(
        "sentinel monitor {name} 127.0.0.1 {} 2\n\
         sentinel down-after-milliseconds {name} 1000\n\
         sentinel failover-timeout {name} 60000\n\
         sentinel parallel-syncs {name} 2\n",
        master.port
    );
    let sentinels: Vec<Server> = (0..3).map(|_| Server::sentinel(&config)).collect();
    for sentinel in &sentinels {
        let mut con = sentinel.client();
        // Sentinel reads each replica's INFO every second instead of every 10 s.
        let _ = redis::cmd("SENTINEL")
            .arg("DEBUG")
            .arg("info-period")
            .arg(1_000)
            .exec(&mut con);
        wait_until("the Sentinels know the group", || {
            let mut count = |what: &str| match call(&mut con, &["SENTINEL", what, name]) {
                Value::Array(entries) => entries.len(),
                _ => 0,
            };
            count("replicas") == 2 && count("sentinels") == 2
        });
    }
    wait_until(
        "the Sentinels see the preferred replica's priority 10",
        || {
            sentinel_view(&sentinels, name, preferred.port)
                .iter()
                .all(|view| view.as_ref().is_some_and(|(priority, _)| priority == "10"))
        },
    );

    // The preferred replica's link carries nothing more, but stays open: it reports its link
    // up, so only its priority keeps Sentinel from choosing it. The link is made anew first,
    // with a partial resync on one connection, so that it is the first the proxy accepts after
    // the kill (a full sync may open a second one for the RDB: Redis 8's rdb channel; the
    // module's own short connections to the master come after the link is up).
    let mut p = preferred.client();
    let relinked = link.accepted();
    call(&mut p, &["CLIENT", "KILL", "TYPE", "master"]);
    wait_until("the preferred replica's link is up again", || {
        info_field(&mut p, "replication", "master_link_status").as_deref() == Some("up")
    });
    link.stall(relinked);
    let stalled = Instant::now();
    let refused = error(&mut m, &["LOCK.ACQUIRE", "stalled", "client", "60000"]);
    assert!(
        refused.starts_with("NOREPLICAS not every in-sync replica acknowledged within"),
        "{refused}"
    );
    assert_eq!(
        call(&mut m, &["EXISTS", "stalled"]),
        Value::Int(0),
        "released"
    );
    let dropped = time_until(
        "the master drops the stalled replica",
        stalled,
        Duration::from_secs(30),
        || members(&mut m) == Some(vec![id(&member)]),
    );
    eprintln!("the stalled replica was dropped {dropped:?} after the stall");
    assert_eq!(priority(&mut preferred.client()), 0);
    wait_until("the Sentinels see the stalled replica's priority 0", || {
        sentinel_view(&sentinels, name, preferred.port)
            .iter()
            .all(|view| {
                view.as_ref()
                    .is_some_and(|(priority, link)| priority == "0" && link == "ok")
            })
    });

    let granted: Vec<(String, i64)> = (0..20)
        .map(|i| {
            let key = format!("order:{i}");
            let token = grant(&mut m, &key);
            (key, token)
        })
        .collect();

    master.kill();
    let killed = Instant::now();
    let promoted = time_until(
        "a Sentinel promotes a replica",
        killed,
        Duration::from_secs(30),
        || {
            sentinels.iter().any(|sentinel| {
                let Ok(mut con) = sentinel.try_client() else {
                    return false;
                };
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(name)
                    .query::<(String, u16)>(&mut con)
                    .is_ok_and(|(_, port)| port != master.port)
            })
        },
    );
    eprintln!("Sentinel named a new master {promoted:?} after the kill");
    let named: Vec<u16> = sentinels
        .iter()
        .filter_map(|sentinel| {
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(name)
                .query::<(String, u16)>(&mut sentinel.client())
                .ok()
                .map(|(_, port)| port)
        })
        .filter(|port| *port != master.port)
        .collect();
    assert!(
        named.iter().all(|port| *port == member.port),
        "Sentinel promoted {named:?}, not the member {}",
        member.port
    );

    let mut new = member.client();
    wait_until("the member is the master", || {
        info_field(&mut new, "replication", "role").as_deref() == Some("master")
    });
    for (key, token) in &granted {
        let held = lock_info(&mut new, key).unwrap_or_else(|| panic!("{key} lost"));
        assert_eq!((held.0.as_str(), held.1), ("client", *token), "{key}");
        assert_eq!(call(&mut new, &["LOCK.FENCE", key]), Value::Int(*token));
    }
}

/// A master back without its data, with no replica yet, does not count its writes alone once a
/// Sentinel watches it: Sentinel may have promoted another server meanwhile (a `make chaos` run
/// found a double grant there). A lone server no Sentinel watches requires none.
#[test]
fn a_master_a_sentinel_watches_requires_an_in_sync_replica_from_the_start() {
    let master = Server::start(&[]);
    let mut con = master.client();
    assert_eq!(insync(&mut con).required, 0, "a lone server");
    let config = format!(
        "sentinel monitor watched 127.0.0.1 {} 1\nsentinel down-after-milliseconds watched 1000\n",
        master.port
    );
    let _sentinel = Server::sentinel(&config);
    wait_until("the Sentinel connected", || insync(&mut con).required == 1);
    let refused = error(&mut con, &["LOCK.ACQUIRE", "k", "me", "10000"]);
    assert!(
        refused.starts_with("NOREPLICAS the master has 0 in-sync replicas"),
        "not counted: {refused}"
    );
    assert_eq!(call(&mut con, &["EXISTS", "k"]), Value::Int(0), "released");
    let granted = common::acquire(&mut con, "k", "me", 10_000, &["NOSYNC"]).expect("granted");
    let after = insync(&mut con);
    assert!(
        granted > 0 && after.members < after.required,
        "not counted: {after:?}"
    );
}

/// A master killed and back at once, empty, while one of the replicas it listed stays away: that
/// replica may still hold the lease the master gave it before and be promoted, so no write
/// counts with the other alone — until the master drops it, when that lease has ended.
#[test]
fn a_master_back_at_once_waits_for_every_replica_it_listed_before_a_write_counts() {
    back_at_once_waits_for_every_replica_it_listed(&[]);
}

/// The same with the master back from its AOF, which replays the lists it sent.
#[test]
fn a_master_back_at_once_from_its_aof_waits_for_every_replica_it_listed() {
    back_at_once_waits_for_every_replica_it_listed(&["--appendonly", "yes"]);
}

fn back_at_once_waits_for_every_replica_it_listed(persistence: &[&str]) {
    // Leases of 10 s: time for the other replica's full sync before the one away is dropped.
    let timing = &["insync-timeout-ms", "10000", "insync-drop-delay-ms", "500"];
    let mut master = Server::with_module_args(timing, persistence);
    let back = Server::with_module_args(timing, &[]);
    let away = Server::with_module_args(timing, &[]);
    back.replicate(&master);
    away.replicate(&master);
    let mut con = master.client();
    wait_for_members(&mut con, &[&back, &away]);
    let kept = master.dir().join("dump.leasehold");
    wait_until("the state file names both", || {
        std::fs::read_to_string(&kept).is_ok_and(|file| file.contains(&id(&away)))
    });
    away.signal("STOP");
    master.kill();
    master.restart();
    let mut con = master.client();
    let mut b = back.client();
    wait_until("the other replica is back in step", || {
        info_field(&mut b, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert_eq!(
        members(&mut con),
        Some({
            let mut both = vec![id(&back), id(&away)];
            both.sort();
            both
        }),
        "both still members"
    );
    let refused = error(&mut con, &["LOCK.ACQUIRE", "k", "me", "10000"]);
    assert!(
        refused.starts_with("NOREPLICAS not every in-sync replica acknowledged"),
        "not counted with one of the two: {refused}"
    );
    let started = Instant::now();
    wait_until("the master dropped the replica that stayed away", || {
        members(&mut con).is_some_and(|members| members == [id(&back)])
    });
    eprintln!("dropped {:?} after the check", started.elapsed());
    let token = common::acquire(&mut con, "k", "me", 10_000, &[]).expect("counts again");
    assert!(token > 0);
    away.signal("CONT");
}
