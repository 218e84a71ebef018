//! An old master back with its own configuration — so as a master, as systemd or a container
//! restart brings it back — after Sentinel promoted another server. Sentinel takes any server
//! that reports the master role as promoted, so until Sentinel turns it into a replica (some
//! 8 s later) it could name it master again without the writes the other master counted. The
//! module makes it follow the master the Sentinels name as soon as their hellos say so; and a
//! promotion of it later, once it is a member, issues tokens above every one before.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::history::History;
use common::sentinel::{Group, MASTER_NAME, replica_fields};
use common::{acquire, call, info_field, wait_until, wait_within};

/// The `slave-priority` each Sentinel reports for the replica at `address`.
fn priorities(group: &Group, address: u16) -> Vec<Option<String>> {
    group
        .sentinels
        .iter()
        .map(|sentinel| replica_fields(sentinel, MASTER_NAME, address)?.remove("slave-priority"))
        .collect()
}

#[test]
fn an_old_master_back_as_a_master_follows_the_master_the_sentinels_name() {
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

    // Back with its own configuration: a master, until it hears the Sentinels name server 1.
    group.restart(0, false, None);
    let back = Instant::now();
    let mut old = group.servers[0].client();
    let following = format!("{}", group.addresses[1]);
    wait_within(
        Duration::from_secs(6),
        "the old master follows server 1, before Sentinel's own 8 s",
        || {
            info_field(&mut old, "replication", "role").as_deref() == Some("slave")
                && info_field(&mut old, "replication", "master_port").as_deref()
                    == Some(following.as_str())
        },
    );
    let followed_after = back.elapsed();
    assert!(
        group.servers[0].log().contains("it follows"),
        "the log says why"
    );
    wait_until("it joined server 1's set", || {
        info_field(&mut old, "lock", "lock_insync_promotable").as_deref() == Some("1")
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
        "it has server 1's lock (followed after {followed_after:?})"
    );
}

/// A master the Sentinels name by an address it does not know as its own (behind NAT or a
/// mapped port; here the proxy's port, once it no longer announces it) asks who is there before
/// following the master named, finds itself, and stays the master.
#[test]
fn a_master_named_by_an_address_it_does_not_know_does_not_follow_itself() {
    let history = Arc::new(History::new());
    let group = Group::start(&history);
    let mut master = group.servers[0].client();
    call(
        &mut master,
        &["CONFIG", "SET", "replica-announce-port", "0"],
    );
    // The Sentinels' next look names it (a few seconds); more on a loaded machine.
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
        info_field(&mut master, "replication", "role").as_deref(),
        Some("master"),
        "{}",
        group.describe()
    );
    assert!(!group.servers[0].log().contains("it follows"));
}
