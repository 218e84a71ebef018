//! An old master back with its own configuration — so as a master, as systemd or a container
//! restart brings it back — after Sentinel promoted another server. Sentinel takes any server
//! that reports the master role as promoted, so until Sentinel turns it into a replica (some
//! 8 s later) it could name it master again without the writes the other master counted. The
//! module has it count no write as soon as the verified Sentinels say they name another master
//! (it never makes it a replica itself: Sentinel does); and a promotion of it later, once it is
//! a member, issues tokens above every one before.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::history::History;
use common::sentinel::{Group, MASTER_NAME, Timing, replica_fields};
use common::{acquire, call, info_field, wait_until, wait_within};
use leasehold_core::fence::{RESERVE, TOKENS_PER_MS};

/// The `slave-priority` each Sentinel reports for the replica at `address`.
fn priorities(group: &Group, address: u16) -> Vec<Option<String>> {
    group
        .sentinels
        .iter()
        .map(|sentinel| replica_fields(sentinel, MASTER_NAME, address)?.remove("slave-priority"))
        .collect()
}

#[test]
fn an_old_master_back_as_a_master_refuses_counted_writes_until_it_replicates() {
    let history = Arc::new(History::new());
    let mut group = Group::start(&history);
    // Server 2 is never promoted, so the first failover goes to server 1 and the second to
    // server 0, the old master.
    call(
        &mut group.servers[2].client(),
        &["CONFIG", "SET", "replica-priority", "0"],
    );
    wait_until("the Sentinels see server 2's priority", || {
        priorities(&group, group.addresses[2])
            .iter()
            .all(|p| p.as_deref() == Some("0"))
    });

    group.kill(0);
    assert!(
        group.wait_for_switch_to(1, Duration::from_secs(30)),
        "{}",
        group.describe()
    );
    let mut current = group.servers[1].client();
    let current_token = acquire(&mut current, "order", "client", 60_000, &[]).expect("granted");

    // Back with its own configuration: a master that counts nothing once the Sentinels it
    // verified say they name server 1, before Sentinel's own 8 s turn it into a replica.
    group.restart(0, false, None);
    let named = format!("127.0.0.1:{}", group.addresses[1]);
    // The log keeps it, whenever Sentinel's conversion comes (about 10 s after the return).
    let replaced = format!("the Sentinels name {named} master, not this server");
    wait_within(
        Duration::from_secs(10),
        "the old master knows it was replaced",
        || group.servers[0].log().contains(&replaced),
    );
    let mut old = group.servers[0].client();
    if info_field(&mut old, "lock", "lock_insync_replaced_by").as_deref() == Some(named.as_str()) {
        let refused = common::error(&mut old, &["LOCK.ACQUIRE", "other", "late", "60000"]);
        assert!(
            refused.starts_with("NOREPLICAS") && refused.contains("name another master"),
            "{refused}"
        );
    }
    let following = group.addresses[1].to_string();
    // Sentinel's conversion closes every client connection (CLIENT KILL TYPE normal).
    let field = |section: &str, name: &str| {
        let mut con = group.servers[0].try_client().ok()?;
        info_field(&mut con, section, name)
    };
    wait_within(
        Duration::from_secs(40),
        "Sentinel makes the old master a replica of server 1",
        || {
            field("replication", "role").as_deref() == Some("slave")
                && field("replication", "master_port").as_deref() == Some(following.as_str())
        },
    );
    let log = group.servers[0].log();
    let turned = log
        .lines()
        .filter(|line| line.contains("enabled (user request from"))
        .collect::<Vec<_>>();
    // A Sentinel's connection (Valkey redacts the names of connections in its log).
    let by_a_sentinel =
        |line: &&str| line.contains("name=sentinel-") || line.contains("*redacted*");
    assert!(
        !turned.is_empty() && turned.iter().all(by_a_sentinel),
        "only Sentinel made it a replica: {turned:?}"
    );
    wait_until("it joined server 1's set", || {
        field("lock", "lock_insync_promotable").as_deref() == Some("1")
    });

    group.kill(1);
    assert!(
        group.wait_for_switch_to(0, Duration::from_secs(30)),
        "Sentinel promoted the old master, now a member: {}",
        group.describe()
    );
    // Sentinel's promotion closes every client connection (CLIENT KILL TYPE normal).
    let mut promoted = group.servers[0].client();
    let next = acquire(&mut promoted, "later", "next-client", 60_000, &[]).expect("granted");
    assert!(
        next > current_token,
        "the promoted old master went back: {next} after {current_token}"
    );
    assert_eq!(
        common::holder(&mut promoted, "order").as_deref(),
        Some("client"),
        "it has server 1's lock"
    );
    assert_eq!(
        info_field(&mut promoted, "lock", "lock_insync_replaced_by").as_deref(),
        Some("")
    );
}

/// A master the Sentinels name by an address it does not know as its own (behind NAT or a
/// mapped port; here the proxy's port, once it no longer announces it) knows itself by the run
/// id the Sentinels read from it, and counts its writes as before.
#[test]
fn a_master_named_by_an_address_it_does_not_know_knows_itself_by_its_run_id() {
    let history = Arc::new(History::new());
    let group = Group::start(&history);
    let mut master = group.servers[0].client();
    call(
        &mut master,
        &["CONFIG", "SET", "replica-announce-port", "0"],
    );
    // The Sentinels' next answer names it (a few seconds); more on a loaded machine.
    wait_within(
        Duration::from_secs(30),
        "it learned the address the Sentinels name it by",
        || {
            group.servers[0]
                .log()
                .contains("lock: the Sentinels name this server")
        },
    );
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        info_field(&mut master, "lock", "lock_insync_replaced_by").as_deref(),
        Some(""),
        "{}",
        group.describe()
    );
    assert!(acquire(&mut master, "still", "a", 60_000, &[]).is_some());
    assert!(!group.servers[0].log().contains("counts no lock write"));
}

/// What `make chaos` found: a master cut off with no replica online (its replica was lost, the
/// other server an old master that never followed it) loses none, so nothing made it hold the
/// fencing counter's reserve; a server that was never its replica is promoted and issues
/// tokens; the cut-off master comes back a master and is named master again by a failover whose
/// `SLAVEOF NO ONE` was lost. The Sentinels' word, which names the other server, makes it hold
/// the reserve: its tokens are above the other master's from then on. Here the other master is
/// stopped (`SIGSTOP`), and Sentinel's default timing keeps the Sentinels from failing it over
/// meanwhile.
#[test]
fn a_master_that_hears_the_sentinels_name_another_issues_tokens_above_it() {
    let history = Arc::new(History::new());
    let mut group = Group::with(&history, &[], Timing::DEFAULT);
    let within = Duration::from_secs(30);
    group.lose(2);
    // Server 0 never reaches server 1 as a replica: server 1, once master, has none to lose.
    group.cut_link(0);
    group.sentinel_failover().expect("SENTINEL FAILOVER");
    assert!(group.wait_for_switch_to(1, within), "{}", group.describe());
    // Sentinel turns it into a replica once it reported the master role for 8 s, read every
    // 10 s, closing every client connection as it does.
    wait_within(
        Duration::from_secs(40),
        "server 0 follows server 1, unsynced",
        || {
            group.servers[0].try_client().is_ok_and(|mut con| {
                info_field(&mut con, "replication", "master_port")
                    == Some(group.addresses[1].to_string())
            })
        },
    );
    let mut old = group.servers[0].client();
    let mut first = group.servers[1].client();
    let first_token = acquire(&mut first, "first", "a", 60_000, &["NOSYNC"]).expect("granted");

    // Server 1 cut off, server 0 promoted in its place: it issues tokens above server 1's.
    group.cut_off(1);
    // Outside server 1's set: a person lets one promotion through, and the replica shows
    // Sentinel its priority meanwhile.
    call(
        &mut old,
        &["CONFIG", "SET", "lock.allow-unsafe-promotion", "yes"],
    );
    wait_within(
        Duration::from_secs(30),
        "the Sentinels see server 0's priority",
        || {
            priorities(&group, group.addresses[0])
                .iter()
                .all(|p| p.as_deref() == Some("100"))
        },
    );
    group.sentinel_failover().expect("SENTINEL FAILOVER");
    assert!(group.wait_for_switch_to(0, within), "{}", group.describe());
    let mut second = group.servers[0].client();
    let second_token = acquire(&mut second, "second", "b", 60_000, &["NOSYNC"]).expect("granted");
    assert!(second_token > first_token);

    // Server 1 back, still a master: from the Sentinels' first hello its tokens are above
    // server 0's, whatever names it master next.
    group.servers[0].signal("STOP");
    group.reconnect(1);
    let deadline = Instant::now() + Duration::from_secs(7);
    let mut tokens = Vec::new();
    while Instant::now() < deadline && tokens.last().is_none_or(|token| *token < second_token) {
        thread::sleep(Duration::from_millis(100));
        let token = group.servers[1]
            .try_client()
            .ok()
            .and_then(|mut con| acquire(&mut con, "probe", "c", 1, &["NOSYNC"]));
        tokens.extend(token);
    }
    group.servers[0].signal("CONT");
    assert!(
        tokens.last().is_some_and(|token| *token > second_token),
        "within 7 s (before Sentinel turns it into a replica), server 1 issued {tokens:?} after \
         server 0's {second_token}"
    );
}

/// A Sentinel that names another master drops its links to the old one and opens new ones,
/// and can name it master again only over those: a master that a Sentinel opens a second
/// command link to holds the reserve, and its next token lands a reserve above its clock (the
/// first command link of each Sentinel since it became master does not).
#[test]
fn a_master_a_sentinel_opens_a_second_link_to_issues_tokens_a_reserve_above_the_clock() {
    let history = Arc::new(History::new());
    let group = Group::start(&history);
    let mut master = group.servers[0].client();
    let first = acquire(&mut master, "before", "a", 60_000, &["NOSYNC"]).expect("granted");
    let next = acquire(&mut master, "same-links", "a", 60_000, &["NOSYNC"]).expect("granted");
    assert_eq!(next, first + 1, "the Sentinels' first links hold nothing");

    let links = || -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut group.servers[0].client())
            .expect("CLIENT LIST");
        list.lines()
            .filter(|line| line.contains(" name=sentinel-") && line.contains("-cmd "))
            .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
            .map(str::to_owned)
            .collect()
    };
    // Apart from the clock's floor at the first token, by more than a scheduling delay.
    thread::sleep(Duration::from_millis(1_500));
    let before = u64::try_from(common::now_ms()).expect("after 1970");
    let dropped = links();
    assert!(!dropped.is_empty(), "the Sentinels' command links");
    for id in &dropped {
        call(&mut master, &["CLIENT", "KILL", "ID", id]);
    }
    wait_until("a Sentinel opened a new command link", || {
        links().iter().any(|id| !dropped.contains(id))
    });
    let after = acquire(&mut master, "after", "a", 60_000, &["NOSYNC"]).expect("granted");
    let floor = before * TOKENS_PER_MS;
    assert!(
        u64::try_from(after).expect("a token") >= floor + RESERVE,
        "{after} is not a reserve above the clock's floor {floor} (the tokens before: {next})"
    );
}
