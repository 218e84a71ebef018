//! Sentinel promotions that change no role: a killed master restarts with its own configuration
//! (so as a master, as systemd or a container restart brings it back), and Sentinel promotes it
//! before it has turned it into a replica — with `SLAVEOF NO ONE`, which Redis answers `OK` and
//! otherwise ignores. Its tokens must still be above every token of the master before it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::history::History;
use common::sentinel::{Group, MASTER_NAME, replica_fields};
use common::{acquire, call, wait_until};

/// The `slave-priority` each Sentinel reports for the replica at `address`.
fn priorities(group: &Group, address: u16) -> Vec<Option<String>> {
    group
        .sentinels
        .iter()
        .map(|sentinel| replica_fields(sentinel, MASTER_NAME, address)?.remove("slave-priority"))
        .collect()
}

#[test]
fn an_old_master_promoted_before_sentinel_made_it_a_replica_issues_larger_tokens() {
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

    group.servers[0].kill();
    assert!(group.wait_for_switch_to(1, Duration::from_secs(20)));
    // Back with its own configuration: a master, until Sentinel turns it into a replica some
    // seconds later. A client that still knew it takes a lock there.
    group.restart(0, false, None);
    let mut old = group.servers[0].client();
    let old_token = acquire(&mut old, "order", "stale-client", 1_000, &[]).expect("granted");
    std::thread::sleep(Duration::from_millis(20));
    let mut current = group.servers[1].client();
    let current_token = acquire(&mut current, "order", "client", 60_000, &[]).expect("granted");
    assert!(current_token > old_token, "server 1's reserve came later");

    group.servers[1].kill();
    assert!(
        group.wait_for_switch_to(0, Duration::from_secs(30)),
        "Sentinel promoted the old master"
    );
    assert!(
        !group.servers[0].log().contains("Connecting to MASTER"),
        "promoted while a master: it never followed server 1"
    );

    // Sentinel's promotion closes every client connection (CLIENT KILL TYPE normal).
    let mut old = group.servers[0].client();
    let promoted_token = acquire(&mut old, "order", "next-client", 60_000, &[]).expect("granted");
    assert!(
        promoted_token > current_token,
        "the promoted old master went back: {promoted_token} after {current_token}"
    );
}
