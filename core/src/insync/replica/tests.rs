use super::*;

fn message(until_ms: u64, timeout_ms: u64, listed: &[&str]) -> Promotable {
    Promotable {
        not_before_ms: None,
        challenge: None,
        master_down_ms: None,
        until_ms,
        timeout_ms,
        listed: listed.iter().map(|id| (*id).to_owned()).collect(),
    }
}

fn me(id: &str) -> bool {
    id == "me:1"
}

#[test]
fn a_replica_is_promotable_while_listed_and_its_lease_lasts() {
    let mut follower = Follower::default();
    assert!(!follower.promotable(0), "starts unpromotable");
    let listing = message(20_000, 12_000, &["me:1"]);
    follower.heard(10_000, &listing, None, me);
    assert!(follower.promotable(19_999));
    assert_eq!(follower.promotability(19_999), Promotability::Lease(20_000));
    assert!(!follower.promotable(20_000), "the master's until caps it");
    follower.heard(1_000, &listing, None, me);
    assert!(!follower.promotable(13_000), "heard + timeout caps it");
    follower.heard(1_000, &message(20_000, 12_000, &["other:1"]), None, me);
    assert!(!follower.promotable(1_001), "not listed");
    assert_eq!(follower.listed(), ["other:1"]);
    follower.forget();
    assert!(follower.listed().is_empty());
}

#[test]
fn sentinel_is_shown_unpromotable_ahead_of_the_leases_end() {
    let mut follower = Follower::default();
    follower.heard(0, &message(12_000, 12_000, &["me:1"]), None, me);
    assert!(follower.shown_promotable(12_000 - LEAD_MS - 1));
    assert!(!follower.shown_promotable(12_000 - LEAD_MS));
    assert!(follower.promotable(12_000 - LEAD_MS), "still promotable");
    follower.heard(0, &message(1_000, 1_000, &["me:1"]), None, me);
    assert!(follower.shown_promotable(749), "a quarter of a short lease");
    assert!(!follower.shown_promotable(750));
}

#[test]
fn a_message_sent_before_the_link_came_up_ends_a_lease_but_gives_none() {
    let mut follower = Follower::default();
    follower.linked(50_000);
    // Replayed from the backlog: sent at 40 000 by the master's clock.
    follower.heard(50_010, &message(52_000, 12_000, &["me:1"]), None, me);
    assert!(!follower.promotable(50_011), "history gives no lease");
    assert_eq!(follower.listed(), ["me:1"], "but says who was listed");
    // Sent less than the clock skew after the link came up: still possibly history.
    follower.heard(50_500, &message(62_900, 12_000, &["me:1"]), None, me);
    assert!(!follower.promotable(50_501));
    follower.heard(51_100, &message(63_000, 12_000, &["me:1"]), None, me);
    assert!(follower.promotable(51_101), "sent after the link came up");
    // A reconnect: the lease stands, the replayed messages do not extend it, and one that
    // does not list this replica ends it.
    follower.linked(60_000);
    follower.heard(60_001, &message(70_000, 12_000, &["me:1"]), None, me);
    assert_eq!(follower.promotability(60_002), Promotability::Lease(63_000));
    follower.heard(60_002, &message(70_000, 12_000, &["b:2"]), None, me);
    assert!(!follower.promotable(60_003));
}

#[test]
fn after_a_full_sync_every_message_listing_it_gives_a_lease() {
    let replayed = |loads: &[(bool, bool)]| {
        let mut follower = Follower::default();
        for &(from_master, complete) in loads {
            follower.loading(from_master);
            follower.loaded(complete);
        }
        follower.forget();
        follower.linked(50_000);
        follower.heard(50_010, &message(52_000, 12_000, &["me:1"]), None, me);
        follower.promotability(50_011)
    };
    assert_eq!(
        replayed(&[(false, true), (true, true)]),
        Promotability::Lease(52_000),
        "it lost nothing it acknowledged: the master's until caps the lease"
    );
    assert_eq!(
        replayed(&[]),
        Promotability::No,
        "it may have loaded older data"
    );
    assert_eq!(
        replayed(&[(true, true), (false, true)]),
        Promotability::No,
        "data from its own disk"
    );
    assert_eq!(
        replayed(&[(true, false)]),
        Promotability::No,
        "a failed full sync leaves older data"
    );
    let mut follower = Follower::default();
    follower.heard(1_000, &message(13_000, 12_000, &["me:1"]), None, me);
    follower.loading(true);
    assert!(
        !follower.promotable(1_001),
        "a full sync ends the lease: it spoke of the data replaced"
    );
}

#[test]
fn a_replica_succeeds_a_master_that_became_a_replica_while_its_lease_lasted() {
    let mut follower = Follower::default();
    follower.heard(1_000, &message(13_000, 12_000, &["me:1"]), Some(4), me);
    assert!(!follower.wants_to_ask_master(3_000), "heard 2 s ago");
    assert!(
        follower.wants_to_ask_master(3_001),
        "silent: ask the master"
    );
    let outside = |listed: &[&str]| {
        let mut follower = Follower::default();
        let mut all = vec!["me:1"];
        all.extend_from_slice(listed);
        follower.heard(1_000, &message(13_000, 12_000, &all), Some(4), me);
        follower.master_reported(5_000, false, None, Some(4));
        let via = "x:2".to_owned();
        follower.master_reported(6_000, false, Some(Cycle::Outside { via }), Some(4));
        follower.to_run(6_000 + CYCLE_SEEN_MS)
    };
    assert_eq!(
        outside(&["x:2"]),
        None,
        "the server in the cycle was a member too: it names it, so this one does not"
    );
    assert_eq!(
        outside(&[]),
        Some("REPLICAOF NO ONE"),
        "the server in the cycle succeeds nobody"
    );

    let mut leaseless = Follower::default();
    leaseless.heard(1_000, &message(13_000, 12_000, &["b:2"]), Some(4), me);
    assert!(
        leaseless.wants_to_ask_master(3_001),
        "without a lease too: a silent master may be in a cycle with it"
    );
    follower.master_reported(3_001, true, None, Some(4));
    assert_eq!(follower.promotability(3_002), Promotability::Lease(13_000));
    follower.master_reported(3_001, false, None, Some(4));
    assert_eq!(follower.promotability(20_000), Promotability::Succession);
    assert!(
        follower.wants_to_ask_master(20_000),
        "watch it become a master"
    );
    follower.epoch_seen(4);
    assert!(follower.promotable(20_000), "the same epoch");
    follower.master_reported(20_000, false, None, Some(4));
    assert!(follower.promotable(30_000));
    follower.master_reported(30_000, true, None, Some(4));
    assert!(
        !follower.promotable(30_000),
        "a master again: its lists decide"
    );
}

#[test]
fn a_succession_ends_with_a_newer_epoch_a_list_a_new_master_or_a_full_sync() {
    let start = || {
        let mut follower = Follower::default();
        follower.heard(1_000, &message(13_000, 12_000, &["me:1"]), Some(4), me);
        follower.master_reported(5_000, false, None, Some(4));
        assert_eq!(follower.promotability(50_000), Promotability::Succession);
        follower
    };
    let mut follower = start();
    follower.epoch_seen(5);
    assert!(
        !follower.promotable(50_000),
        "a failover promoted another server"
    );
    let mut follower = start();
    follower.heard(50_000, &message(62_000, 12_000, &["b:2"]), Some(4), me);
    assert!(!follower.promotable(50_001), "a master's list decides");
    let mut follower = start();
    follower.interrupted();
    assert!(!follower.promotable(50_000), "a new master, or a full sync");
}

#[test]
fn a_successor_in_a_replication_cycle_names_what_to_run() {
    let mut follower = Follower::default();
    follower.heard(1_000, &message(13_000, 12_000, &["me:1"]), Some(4), me);
    follower.master_reported(5_000, false, None, Some(4));
    assert_eq!(follower.to_run(60_000), None, "no cycle: Sentinel promotes");
    follower.master_reported(6_000, false, Some(Cycle::ThroughMe), Some(4));
    assert!(follower.in_cycle());
    follower.master_reported(7_000, false, Some(Cycle::ThroughMe), Some(4));
    assert_eq!(
        follower.to_run(6_000 + CYCLE_SEEN_MS - 1),
        None,
        "Sentinel may not have read the old master's role yet"
    );
    assert_eq!(
        follower.to_run(6_000 + CYCLE_SEEN_MS),
        Some("REPLICAOF NO ONE")
    );
    follower.interrupted();
    assert!(!follower.in_cycle(), "a new master");
    assert_eq!(follower.to_run(60_000), None);

    let mut leaseless = Follower::default();
    leaseless.master_reported(5_000, false, Some(Cycle::ThroughMe), Some(4));
    assert!(leaseless.in_cycle());
    assert_eq!(
        leaseless.to_run(60_000),
        None,
        "no succession: it cannot tell it has every counted write"
    );
    leaseless.master_reported(6_000, true, None, Some(4));
    assert!(!leaseless.in_cycle(), "its master is a master again");
}

#[test]
fn no_succession_without_a_lease_without_sentinels_or_after_a_failover() {
    let mut follower = Follower::default();
    follower.heard(1_000, &message(13_000, 12_000, &["me:1"]), Some(4), me);
    follower.master_reported(13_000, false, None, Some(4));
    assert!(!follower.promotable(13_000), "the lease had ended");
    follower.master_reported(5_000, false, None, Some(5));
    assert!(
        !follower.promotable(20_000),
        "a failover since the lease: the new master may drop this replica"
    );
    follower.master_reported(5_000, false, None, None);
    assert!(
        !follower.promotable(20_000),
        "no Sentinel: no epoch to end it"
    );
    let mut unwatched = Follower::default();
    unwatched.heard(1_000, &message(13_000, 12_000, &["me:1"]), None, me);
    unwatched.master_reported(5_000, false, None, None);
    assert_eq!(unwatched.promotability(5_000), Promotability::Lease(13_000));
    assert!(!unwatched.promotable(13_000));
}

#[test]
fn the_operators_priority_is_kept_and_given_back() {
    let mut priority = Priority::new(10);
    assert_eq!(priority.next(10, false), Some(0));
    assert_eq!(priority.next(0, false), None);
    assert_eq!(priority.next(0, true), Some(10));
    assert_eq!(priority.next(10, true), None);
    assert_eq!(priority.next(25, true), None, "CONFIG SET by the operator");
    assert_eq!(priority.operator(), 25);
    assert_eq!(priority.next(25, false), Some(0));
    assert_eq!(priority.next(0, true), Some(25));
}

#[test]
fn a_paused_masters_heartbeat_gives_no_lease_after_a_newer_epoch() {
    let mut follower = Follower::default();
    follower.heard(1_000, &message(13_000, 12_000, &["me:1"]), Some(4), me);
    follower.heard_paused(10_000, &message(22_000, 12_000, &["me:1"]), Some(4), me);
    assert!(
        follower.promotable(21_000),
        "asked while paused: the lease goes on"
    );
    follower.heard_paused(20_000, &message(32_000, 12_000, &["me:1"]), Some(5), me);
    assert!(
        !follower.promotable(23_000),
        "a failover promoted another server meanwhile: its lease ends as given"
    );
}

#[test]
fn a_listed_replica_is_promotable_past_its_lease_while_the_sentinels_say_its_master_went_silent_before()
 {
    let said = |master_down_ms| Promotable {
        master_down_ms,
        ..message(13_000, 12_000, &["me:1"])
    };
    let margin = master_down_margin_ms(12_000).expect("long enough");
    let mut follower = Follower::default();
    follower.heard(1_000, &said(Some(60_000)), Some(4), me);
    follower.sentinels_said(20_000, Some(13_000 - margin));
    assert_eq!(follower.promotability(20_000), Promotability::MasterDown);
    assert_eq!(
        follower.promotability(20_000 + SENTINELS_WORD_MS + 1),
        Promotability::No,
        "a stale word"
    );
    follower.sentinels_said(20_000, Some(13_001 - margin));
    assert_eq!(
        follower.promotability(20_000),
        Promotability::No,
        "the master answered them too late"
    );
    follower.sentinels_said(73_000, Some(0));
    assert_eq!(
        follower.promotability(73_000),
        Promotability::No,
        "the master's promise ended"
    );
    follower.sentinels_said(20_000, None);
    assert_eq!(
        follower.promotability(20_000),
        Promotability::No,
        "no majority"
    );

    let mut unpromised = Follower::default();
    unpromised.heard(1_000, &said(None), Some(4), me);
    unpromised.sentinels_said(20_000, Some(0));
    assert_eq!(unpromised.promotability(20_000), Promotability::No);
    let mut dropped = Follower::default();
    dropped.heard(1_000, &said(Some(60_000)), Some(4), me);
    dropped.heard(2_000, &message(14_000, 12_000, &["b:2"]), Some(4), me);
    dropped.sentinels_said(20_000, Some(0));
    assert_eq!(
        dropped.promotability(20_000),
        Promotability::No,
        "the master's last list did not name it"
    );
}
