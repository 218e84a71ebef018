use super::*;

const TIMING: Timing = Timing {
    timeout_ms: 12_000,
    drop_delay_ms: 11_000,
    strict: false,
    master_down_ms: None,
};

/// No Sentinel had the master's reply: what a master that hears no Sentinel knows.
const fn unanswered(_from_ms: u64, _to_ms: u64) -> bool {
    false
}

fn replica(id: &str, online: bool, acked: u64, lag_s: u64) -> Replica {
    Replica {
        id: id.to_owned(),
        online,
        acked,
        lag_ms: lag_s * 1_000,
        module: Module::Runs,
    }
}

fn replication(offset: u64, replicas: Vec<Replica>) -> Replication {
    Replication {
        offset,
        replicas,
        held_back: Vec::new(),
    }
}

#[test]
fn info_replication_is_read() {
    let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=127.0.0.1,port=6380,state=online,offset=120,lag=0\r\n\
        slave1:ip=10.0.0.2,port=6381,state=wait_bgsave,offset=0,lag=3\r\n\
        slaves:nonsense\r\nslave2:port=1\r\nmaster_repl_offset:130\r\n";
    let mut read = parse(info);
    assert_eq!(read.offset, 130);
    assert!(
        read.replicas
            .iter()
            .all(|replica| replica.module == Module::Unproven { silent: false }),
        "INFO does not say which replicas run the module"
    );
    for replica in &mut read.replicas {
        replica.module = Module::Runs;
    }
    assert_eq!(
        read.replicas,
        vec![
            replica("127.0.0.1:6380", true, 120, 0),
            replica("10.0.0.2:6381", false, 0, 3)
        ]
    );
}

#[test]
fn a_replica_joins_once_it_caught_up() {
    let mut set = Master::default();
    let behind = replication(100, vec![replica("a:1", true, 50, 0)]);
    assert!(!set.observe(0, &behind, TIMING, unanswered));
    assert!(set.awaits_acknowledgement(), "asked for it at once");
    assert_eq!(set.status(&behind, 1).required, 0, "not grouped yet");
    let later = replication(200, vec![replica("a:1", true, 100, 0)]);
    assert!(
        set.observe(10, &later, TIMING, unanswered),
        "acknowledged what it had to"
    );
    assert!(!set.awaits_acknowledgement());
    assert_eq!(set.members().collect::<Vec<_>>(), ["a:1"]);
    let status = set.status(&later, 1);
    assert_eq!((status.acked, status.members, status.required), (100, 1, 1));
    assert!(status.counts(100) && !status.counts(101));
}

#[test]
fn a_member_found_without_the_module_leaves_at_once() {
    let mut set = Master::default();
    let caught_up = replication(100, vec![replica("a:1", true, 100, 0)]);
    set.observe(0, &caught_up, TIMING, unanswered);
    set.observe(10, &caught_up, TIMING, unanswered);
    set.list(10, TIMING);
    assert!(set.remove("a:1"), "no lease to wait out");
    assert!(!set.remove("a:1"));
    let status = set.status(&caught_up, 1);
    assert_eq!((status.members, status.required), (0, 1), "still grouped");
}

#[test]
fn a_replica_that_acknowledged_nothing_has_not_caught_up() {
    let mut set = Master::default();
    let fresh = replication(0, vec![replica("a:1", true, 0, 0)]);
    assert!(
        !set.observe(0, &fresh, TIMING, unanswered),
        "a new master's offset is 0"
    );
    assert!(set.observe(
        1,
        &replication(14, vec![replica("a:1", true, 14, 0)]),
        TIMING,
        unanswered
    ));
}

#[test]
fn a_replica_that_goes_offline_before_catching_up_starts_again() {
    let mut set = Master::default();
    set.observe(
        0,
        &replication(100, vec![replica("a:1", true, 0, 0)]),
        TIMING,
        unanswered,
    );
    set.observe(1, &replication(150, vec![]), TIMING, unanswered);
    set.observe(
        2,
        &replication(200, vec![replica("a:1", true, 120, 0)]),
        TIMING,
        unanswered,
    );
    assert_eq!(set.members().count(), 0, "it must reach 200 now");
}

#[test]
fn a_member_gone_is_unlisted_at_once_then_dropped_after_its_lease_and_the_delay() {
    let mut set = Master::default();
    let up = replication(
        10,
        vec![replica("a:1", true, 10, 0), replica("b:2", true, 10, 0)],
    );
    set.observe(0, &up, TIMING, unanswered);
    assert_eq!(set.list(0, TIMING), ["a:1", "b:2"]);
    // b dies at 500: its line disappears, though it acknowledged less than 2 s ago.
    let down = replication(20, vec![replica("a:1", true, 20, 0)]);
    set.observe(1_000, &down, TIMING, unanswered);
    assert_eq!(set.list(1_000, TIMING), ["a:1"], "b is gone: no new lease");
    let status = set.status(&down, 1);
    assert_eq!(
        (status.members, status.acked),
        (2, 0),
        "b still counts, and lacks it"
    );
    let last_lease_end = TIMING.timeout_ms;
    set.observe(
        last_lease_end + TIMING.drop_delay_ms - 1,
        &down,
        TIMING,
        unanswered,
    );
    assert_eq!(set.members().count(), 2);
    assert!(set.observe(
        last_lease_end + TIMING.drop_delay_ms,
        &down,
        TIMING,
        unanswered
    ));
    assert_eq!(set.members().collect::<Vec<_>>(), ["a:1"]);
    assert!(set.status(&down, 1).counts(20));
}

#[test]
fn a_member_back_within_its_lease_is_listed_again() {
    let mut set = Master::default();
    set.observe(
        0,
        &replication(5, vec![replica("a:1", true, 5, 0)]),
        TIMING,
        unanswered,
    );
    set.observe(1_000, &replication(5, vec![]), TIMING, unanswered);
    assert!(set.list(1_000, TIMING).is_empty(), "a blip");
    set.observe(
        1_500,
        &replication(6, vec![replica("a:1", true, 6, 0)]),
        TIMING,
        unanswered,
    );
    assert_eq!(set.list(1_500, TIMING), ["a:1"]);
}

#[test]
fn strict_never_drops() {
    let strict = Timing {
        strict: true,
        ..TIMING
    };
    let mut set = Master::default();
    set.observe(
        0,
        &replication(1, vec![replica("a:1", true, 1, 0)]),
        strict,
        unanswered,
    );
    set.observe(u64::MAX / 2, &replication(1, vec![]), strict, unanswered);
    assert_eq!(set.members().count(), 1);
}

#[test]
fn a_lagging_but_connected_member_is_unlisted_by_its_lag() {
    let mut set = Master::default();
    set.observe(
        0,
        &replication(1, vec![replica("a:1", true, 1, 0)]),
        TIMING,
        unanswered,
    );
    let lagging = replication(9, vec![replica("a:1", true, 1, 5)]);
    set.observe(10_000, &lagging, TIMING, unanswered);
    assert!(set.list(10_000, TIMING).is_empty());
    set.observe(
        10_500,
        &replication(9, vec![replica("a:1", true, 9, 0)]),
        TIMING,
        unanswered,
    );
    assert_eq!(
        set.list(10_500, TIMING),
        ["a:1"],
        "it caught up: listed again"
    );
}

#[test]
fn a_promoted_replica_inherits_the_others() {
    let listed = vec!["me:1".to_owned(), "b:2".to_owned()];
    let mut set = Master::inherit(&listed, |id| id == "me:1", 5_000, TIMING);
    assert_eq!(set.members().collect::<Vec<_>>(), ["b:2"]);
    assert!(set.grouped());
    let nobody = replication(7, vec![]);
    assert_eq!(set.status(&nobody, 1).acked, 0, "b must re-attach");
    let drop_at = 5_000 + TIMING.timeout_ms + TIMING.drop_delay_ms;
    set.observe(drop_at - 1, &nobody, TIMING, unanswered);
    assert_eq!(set.members().count(), 1);
    set.observe(drop_at, &nobody, TIMING, unanswered);
    assert_eq!(set.members().count(), 0);
    assert!(!set.status(&nobody, 1).counts(0), "below the minimum");
}

#[test]
fn promotions_are_refused_where_they_could_lose_counted_writes() {
    let replica = |promotable| Standing {
        master: false,
        promotable,
        watched_by_sentinel: true,
    };
    let master = |watched_by_sentinel| Standing {
        master: true,
        promotable: false,
        watched_by_sentinel,
    };
    for promotion in [
        Promotion::ReplicaofNoOne,
        Promotion::ForcedClusterFailover,
        Promotion::PsyncFailover,
    ] {
        assert_eq!(
            refusal(promotion, replica(false)),
            Some(Refusal::OutsideSet)
        );
        assert_eq!(refusal(promotion, replica(true)), None);
        assert_eq!(refusal(promotion, master(true)), None, "Redis's own answer");
    }
    assert_eq!(
        refusal(Promotion::Failover, replica(false)),
        None,
        "Redis refuses it"
    );
    assert_eq!(
        refusal(Promotion::Failover, master(true)),
        Some(Refusal::Sentinel)
    );
    assert_eq!(refusal(Promotion::Failover, master(false)), None);
}

/// A member listed with a 37 s lease, then (the lease shrunk) with `TIMING`'s at 1 000: the next
/// look notes the offset past that list (20), and the one after sees the member's
/// acknowledgement `acked`.
fn shortened(acked: u64) -> Master {
    let long = Timing {
        timeout_ms: 37_000,
        ..TIMING
    };
    let mut set = Master::default();
    set.observe(
        0,
        &replication(5, vec![replica("a:1", true, 5, 0)]),
        long,
        unanswered,
    );
    set.list(0, long);
    set.list(1_000, TIMING);
    for (at, seen) in [(1_200, 10), (1_400, acked)] {
        set.observe(
            at,
            &replication(20, vec![replica("a:1", true, seen, 0)]),
            TIMING,
            unanswered,
        );
    }
    set
}

#[test]
fn a_shorter_lease_counts_once_the_member_acknowledged_its_message() {
    let gone = replication(20, vec![]);
    let mut unheard = shortened(19);
    unheard.observe(14_000, &gone, TIMING, unanswered);
    assert_eq!(
        unheard.members().count(),
        1,
        "it may not have heard the shorter lease: the longer one stands"
    );
    unheard.observe(37_000 + TIMING.drop_delay_ms, &gone, TIMING, unanswered);
    assert_eq!(unheard.members().count(), 0);

    let mut heard = shortened(20);
    heard.observe(
        1_000 + TIMING.timeout_ms + TIMING.drop_delay_ms,
        &gone,
        TIMING,
        unanswered,
    );
    assert_eq!(
        heard.members().count(),
        0,
        "acknowledged: the shorter lease"
    );
}

#[test]
fn with_members_an_acknowledged_offset_of_zero_never_counts() {
    let waiting = Status {
        offset: 0,
        acked: 0,
        members: 2,
        required: 1,
        replaced: false,
        unproven: 0,
        silent: false,
    };
    assert!(!waiting.counts(0), "a master back at once, no backlog yet");
    let lone = Status {
        offset: 0,
        acked: 0,
        members: 0,
        required: 0,
        replaced: false,
        unproven: 0,
        silent: false,
    };
    assert!(lone.counts(0));
    let unproven = Status {
        unproven: 1,
        ..lone
    };
    assert!(
        !unproven.counts(0),
        "a replica has not said it runs the module"
    );
}

#[test]
fn no_write_counts_while_a_replica_has_not_said_it_runs_the_module() {
    let mut set = Master::default();
    let mut quiet = replica("b:1", true, 100, 0);
    quiet.module = Module::Unproven { silent: false };
    let attached = replication(100, vec![replica("a:1", true, 100, 0), quiet.clone()]);
    set.observe(0, &attached, TIMING, unanswered);
    assert_eq!(
        set.members().collect::<Vec<_>>(),
        vec!["a:1"],
        "b may not join"
    );
    let status = set.status(&attached, 1);
    assert_eq!((status.unproven, status.acked), (1, 0));
    assert!(!status.counts(100));
    assert_eq!(set.unproven(), (1, false));
    quiet.module = Module::Unproven { silent: true };
    let silent = replication(100, vec![replica("a:1", true, 100, 0), quiet]);
    set.observe(10, &silent, TIMING, unanswered);
    assert_eq!(set.unproven(), (1, true));
    assert!(set.status(&silent, 1).silent);
}

#[test]
fn a_member_proving_a_new_challenge_stays_listed_but_its_acknowledgements_wait() {
    let mut set = Master::default();
    set.observe(
        0,
        &replication(100, vec![replica("a:1", true, 100, 0)]),
        TIMING,
        unanswered,
    );
    let mut proving = replica("a:1", true, 100, 0);
    proving.module = Module::Unproven { silent: false };
    let now = replication(100, vec![proving]);
    set.observe(200, &now, TIMING, unanswered);
    assert_eq!(
        set.list(200, TIMING),
        vec!["a:1"],
        "its lease is not taken away"
    );
    assert!(!set.status(&now, 1).counts(100));
    set.replica_online();
    assert_eq!(set.unproven(), (1, false), "until the next look");
}

#[test]
fn a_member_that_may_be_promoted_on_the_sentinels_word_is_dropped_only_on_theirs() {
    let timing = Timing {
        master_down_ms: Some(100_000),
        drop_delay_ms: 1_000,
        ..TIMING
    };
    let before = replica::master_down_before_ms(timing.timeout_ms).expect("long enough");
    let up = replication(10, vec![replica("a:1", true, 10, 0)]);
    let mut set = Master::default();
    set.observe(0, &up, timing, unanswered);
    assert_eq!(set.list(0, timing), ["a:1"], "a lease until 12 000");
    let gone = replication(10, vec![]);
    assert!(
        !set.observe(20_000, &gone, timing, unanswered),
        "no word: kept"
    );
    let asked = std::cell::Cell::new((0, 0));
    let answered = |from, to| {
        asked.set((from, to));
        true
    };
    assert!(set.observe(20_000, &gone, timing, answered), "dropped");
    assert_eq!(
        asked.get(),
        (12_000 - before, 20_000 - replica::MASTER_DOWN_WORD_AGE_MS),
        "a reply from before the lease's end, and an old enough word"
    );
    let mut set = Master::default();
    set.observe(0, &up, timing, unanswered);
    set.list(0, timing);
    assert!(
        !set.observe(112_999, &gone, timing, unanswered),
        "the promise lasts its 100 s and the drop delay"
    );
    assert!(set.observe(113_000, &gone, timing, unanswered));
}
