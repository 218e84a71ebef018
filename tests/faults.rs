//! Fault injection: fencing tokens never go backwards, whatever was lost.
//!
//! Each test really does it — `kill -9` under each persistence setting, a replica cut off from
//! its master while the master keeps granting, failover, the old master coming back — and
//! checks that the next token is larger than every token a client was ever given
//! (docs/guarantees.md).

mod common;

use std::time::Instant;

use common::proxy::LinkProxy;
use common::{
    Server, acquire, assert_same_holding, call, holder, lock_info, now_ms, promote, wait_replicas,
};
use redis::{Connection, Value};

/// How far the first token after a start jumps ahead of a loaded counter or the clock.
const RESERVE: i64 = 1_000_000_000;

/// Takes `count` locks `prefix:0..count` in pipelines and returns the tokens the server
/// acknowledged.
fn burst(con: &mut Connection, prefix: &str, count: usize) -> Vec<i64> {
    let mut tokens = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("LOCK.ACQUIRE")
                .arg(format!("{prefix}:{i}"))
                .arg("owner")
                .arg(600_000);
        }
        let granted: Vec<Option<i64>> = pipe.query(con).expect("burst");
        tokens.extend(granted.into_iter().map(|token| token.expect("free key")));
    }
    tokens
}

fn max(tokens: &[i64]) -> i64 {
    tokens.iter().copied().max().unwrap_or(0)
}

/// A new holding of a key never used before: the next token the server issues.
fn next_token(con: &mut Connection) -> i64 {
    let key = format!("fresh:{}", uuid::Uuid::new_v4());
    acquire(con, &key, "newcomer", 60_000, &["NOSYNC"]).expect("a fresh key is free")
}

fn assert_increasing(tokens: &[i64]) {
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens went back: {tokens:?}"
    );
}

#[test]
fn kill_with_appendfsync_always_loses_no_acknowledged_lock() {
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let tokens = burst(&mut con, "held", 300);
    acquire(&mut con, "held:0", "owner", 600_000, &["REENTRANT"]).expect("re-entered");
    let before: Vec<_> = (0..300)
        .map(|i| lock_info(&mut con, &format!("held:{i}")))
        .collect();
    let killed_at = Instant::now();
    server.kill();
    server.restart();
    let mut con = server.client();
    let down_ms = i64::try_from(killed_at.elapsed().as_millis()).expect("ms") + 100;
    for (i, was) in before.iter().enumerate() {
        let was = was.as_ref().expect("held before");
        let is = lock_info(&mut con, &format!("held:{i}")).expect("held after the kill");
        assert_same_holding(was, &is, down_ms + 5_000);
    }
    assert_eq!(lock_info(&mut con, "held:0").map(|info| info.3), Some(2));
    assert!(next_token(&mut con) > max(&tokens));
}

#[test]
fn kill_with_appendfsync_everysec_after_a_burst_never_reissues_a_token() {
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let mut con = server.client();
    let tokens = burst(&mut con, "burst", 20_000);
    server.kill();
    server.restart();
    assert!(next_token(&mut server.client()) > max(&tokens));
}

#[test]
fn kill_with_rdb_snapshots_only_never_reissues_a_lost_token() {
    let mut server = Server::start(&["--save", ""]);
    let mut con = server.client();
    let saved = burst(&mut con, "saved", 100);
    call(&mut con, &["SAVE"]);
    let lost = burst(&mut con, "lost", 20_000);
    server.kill();
    // Without its lease horizon (a machine crash can lose its last write; with it, nothing is
    // granted before the lost leases end: tests/restart.rs), tokens alone keep the order.
    server.forget_leases();
    server.restart();
    let mut con = server.client();
    assert_eq!(
        lock_info(&mut con, "saved:99").map(|info| info.1),
        Some(saved[99])
    );
    assert_eq!(
        lock_info(&mut con, "lost:0"),
        None,
        "the snapshot really lacked these"
    );
    let regranted =
        acquire(&mut con, "lost:0", "intruder", 60_000, &["NOSYNC"]).expect("free again");
    assert!(
        regranted > max(&lost),
        "the lock granted again has a larger token"
    );
}

#[test]
fn kill_with_no_persistence_at_all_still_moves_forward() {
    // Nothing survives; the clock floor (unix-ms × 1000) and the reserve carry the order,
    // assuming the clock did not go back across the restart.
    let mut server = Server::start(&["--save", "", "--appendonly", "no"]);
    let mut con = server.client();
    let tokens = burst(&mut con, "gone", 20_000);
    server.kill();
    server.forget_leases();
    server.restart();
    let mut con = server.client();
    assert_eq!(call(&mut con, &["DBSIZE"]), Value::Int(0));
    assert!(next_token(&mut con) > max(&tokens));
}

#[test]
fn failover_to_a_replica_that_fell_behind_never_reissues_a_token() {
    let mut old_master = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let new_master = Server::start(&[]);
    let link = LinkProxy::to(old_master.port);
    new_master.replicate_through(link.port);
    let mut old = old_master.client();
    let synced = burst(&mut old, "synced", 100);
    wait_replicas(&mut old, 1);

    link.cut();
    let unseen = burst(&mut old, "unseen", 5_000);
    old_master.kill();

    let mut new = new_master.client();
    promote(&mut new);
    assert_eq!(
        lock_info(&mut new, "synced:99").map(|info| info.1),
        Some(synced[99])
    );
    assert_eq!(
        lock_info(&mut new, "unseen:0"),
        None,
        "the replica never received these"
    );
    let regranted =
        acquire(&mut new, "unseen:0", "intruder", 60_000, &["NOSYNC"]).expect("granted again");
    let highest_old = max(&unseen);
    assert!(regranted > highest_old, "{regranted} after {highest_old}");

    // The old master comes back (with its AOF) and is made a replica of the new one.
    old_master.restart();
    old_master.replicate(&new_master);
    let mut old = old_master.client();
    assert_eq!(holder(&mut old, "unseen:0"), Some("intruder".into()));
    let later = acquire(&mut new, "later", "someone", 60_000, &["NOSYNC"]).expect("granted");
    assert!(later > regranted);
    wait_replicas(&mut new, 1);
    assert_eq!(call(&mut old, &["LOCK.FENCE", "later"]), Value::Int(later));

    // And failing back over to it continues above everything either master issued.
    promote(&mut old);
    assert!(next_token(&mut old) > later);
}

// The next four are the stacked-reserve reports: each start or promotion of 0.1.0 jumped 10^9
// above the last token, so a later start with less state came back below.

#[test]
fn a_restart_from_rdb_then_one_with_nothing_goes_forward() {
    let mut server = Server::start(&[]);
    let mut tokens = vec![next_token(&mut server.client())];
    call(&mut server.client(), &["SAVE"]);
    server.shutdown("NOSAVE");
    server.restart();
    tokens.push(next_token(&mut server.client()));
    server.restart_empty();
    tokens.push(next_token(&mut server.client()));
    assert_increasing(&tokens);
}

#[test]
fn three_restarts_from_rdb_then_one_from_the_oldest_rdb_go_forward() {
    let mut server = Server::start(&[]);
    let (rdb, oldest) = (
        server.dir().join("dump.rdb"),
        server.dir().join("oldest.rdb"),
    );
    let mut tokens = Vec::new();
    for round in 0..4 {
        tokens.push(next_token(&mut server.client()));
        call(&mut server.client(), &["SAVE"]);
        if round == 0 {
            std::fs::copy(&rdb, &oldest).expect("keep the first RDB");
        }
        server.shutdown("NOSAVE");
        server.restart();
    }
    server.shutdown("NOSAVE");
    std::fs::copy(&oldest, &rdb).expect("a backup restored");
    server.restart();
    tokens.push(next_token(&mut server.client()));
    assert_increasing(&tokens);
}

#[test]
fn a_promoted_replica_that_restarts_with_nothing_goes_forward() {
    let master = Server::start(&[]);
    let mut replica = Server::start(&[]);
    replica.replicate(&master);
    let mut con = master.client();
    let mut tokens = vec![next_token(&mut con)];
    wait_replicas(&mut con, 1);
    promote(&mut replica.client());
    tokens.push(next_token(&mut replica.client()));
    replica.restart_empty();
    tokens.push(next_token(&mut replica.client()));
    assert_increasing(&tokens);
}

#[test]
fn failovers_back_and_forth_then_the_server_that_lost_its_data_takes_over() {
    let mut servers = [Server::start(&[]), Server::start(&[])];
    servers[1].replicate(&servers[0]);
    let (mut master, mut replica) = (0, 1);
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let mut con = servers[master].client();
        tokens.push(next_token(&mut con));
        wait_replicas(&mut con, 1);
        promote(&mut servers[replica].client());
        servers[master].replicate(&servers[replica]);
        (master, replica) = (replica, master);
    }
    tokens.push(next_token(&mut servers[master].client()));
    // The replica loses everything and takes over before it could sync again.
    servers[replica].restart_empty();
    tokens.push(next_token(&mut servers[replica].client()));
    assert_increasing(&tokens);
}

#[test]
fn tokens_follow_the_clock_and_stay_far_below_two_to_the_53() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let before = now_ms();
    let first = next_token(&mut con);
    let after = now_ms();
    assert!(
        first >= before * 1000 + RESERVE,
        "first token {first} vs clock {before}"
    );
    assert!(
        first <= after * 1000 + RESERVE + 1,
        "first token {first} vs clock {after}"
    );
    let years_left_at_a_million_per_second = ((1_i64 << 53) - first) / 1_000_000 / 86_400 / 366;
    assert!(
        years_left_at_a_million_per_second > 100,
        "{first}: a century of headroom"
    );
}

// A node told to be the master while it already is one changes no role, so no role-change event
// reaches the module (issue: Sentinel promoting an old master that came back with its own
// configuration). `b`'s counter dates from its first grant; `a` starts later, so its start
// reserve lands above everything `b` issued. When `b` is then promoted, its tokens must pass `a`'s.

/// A master started (and granting) after `b` issued `b_token`: its first token, above
/// `b_token` because its start reserve is later than `b`'s.
fn a_later_master(b_token: i64) -> (Server, i64) {
    std::thread::sleep(std::time::Duration::from_millis(20));
    let a = Server::start(&[]);
    let a_token = next_token(&mut a.client());
    assert!(
        a_token > b_token,
        "the later start's tokens are above: {a_token} after {b_token}"
    );
    (a, a_token)
}

#[test]
fn a_master_told_to_be_a_master_issues_tokens_above_a_later_master() {
    let b = Server::start(&[]);
    let mut b_con = b.client();
    let mut b_token = acquire(&mut b_con, "x", "b", 100, &["NOSYNC"]).expect("granted");
    // Sentinel sends it in MULTI (with CONFIG REWRITE and CLIENT KILL).
    for (command, in_multi) in [
        ("REPLICAOF NO ONE", false),
        ("slaveof no one", false),
        ("SLAVEOF NO ONE", true),
    ] {
        let (_a, a_token) = a_later_master(b_token);
        // The proof's one clock condition: the promotion is at least 1 ms after the token.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let words: Vec<&str> = command.split(' ').collect();
        let mut promote = redis::pipe();
        promote.cmd(words[0]).arg(&words[1..]);
        if in_multi {
            promote.atomic();
        }
        let _: Value = promote.query(&mut b_con).expect(command);
        b_token = acquire(
            &mut b_con,
            &format!("k:{command}"),
            "b",
            10_000,
            &["NOSYNC"],
        )
        .expect("granted");
        assert!(
            b_token > a_token,
            "{command} (MULTI: {in_multi}): {b_token} is below the other master's {a_token}"
        );
    }
}

#[test]
fn a_delayed_restart_grants_nothing_until_every_lost_lease_has_ended() {
    // A master without persistence holds a lock replicated to its replica, is killed and comes
    // back at once, empty, as a master: its replica resyncs from it and loses the lock too.
    // With lock.restart-delay-ms at least the longest lease, nobody is granted the lock before
    // the lease its holder counts on has ended.
    let mut master = Server::with_module_args(&["restart-delay-ms", "1500"], &[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    wait_out_the_restart_delay(&mut master);
    let mut con = master.client();
    let asked = Instant::now();
    acquire(&mut con, "job", "first", 1_500, &["NOSYNC"]).expect("granted");
    wait_replicas(&mut con, 1);
    master.kill();
    master.restart();
    let restarted = Instant::now();
    let mut con = master.client();
    let refused = common::error(&mut con, &["LOCK.ACQUIRE", "job", "second", "1500"]);
    assert!(
        refused.starts_with("TRYAGAIN") && refused.contains("; retry in "),
        "{refused}"
    );
    // NOSYNC: this is about the delay, not about the replica's return to the in-sync set.
    let granted = acquire(
        &mut con,
        "job",
        "second",
        1_500,
        &["WAIT", "5000", "NOSYNC"],
    );
    assert!(granted.is_some(), "granted once the delay is over");
    assert!(
        restarted.elapsed().as_millis() >= 1_400,
        "not before the delay"
    );
    assert!(
        asked.elapsed().as_millis() >= 1_500,
        "after the first lease ended"
    );
    let refused = Server::refused(&["restart-delay-ms", "86400001"]);
    assert!(
        refused.contains("lock.restart-delay-ms must be 0 to 86400000"),
        "{refused}"
    );
}

/// Waits out `server`'s own restart delay (its first start).
fn wait_out_the_restart_delay(server: &mut Server) {
    let mut con = server.client();
    let granted = acquire(&mut con, "warm-up", "w", 1_000, &["WAIT", "5000", "NOSYNC"]);
    assert!(granted.is_some());
}
