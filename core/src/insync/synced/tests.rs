use super::*;

fn status(offset: u64, acked: u64, members: usize, required: usize) -> Status {
    Status {
        offset,
        acked,
        members,
        required,
        replaced: false,
        unproven: 0,
        silent: false,
    }
}

#[test]
fn a_write_counts_once_every_member_acknowledged_the_offset_of_its_first_look() {
    let mut pending = Pending::default();
    pending.hold("a", 1_000, 500);
    assert!(pending.ask(), "the replicas are asked once");
    pending.hold("b", 1_000, 500);
    assert!(pending.ask());
    assert!(!pending.ask());
    assert_eq!(pending.settle(1_001, &status(100, 90, 1, 1)), vec![]);
    pending.hold("c", 1_002, 500);
    assert_eq!(
        pending.settle(1_003, &status(120, 100, 1, 1)),
        vec![("a", Settled::Counted), ("b", Settled::Counted)],
        "c's offset is 120"
    );
    assert_eq!(
        pending.settle(1_004, &status(130, 120, 1, 1)),
        vec![("c", Settled::Counted)]
    );
    assert!(pending.is_empty());
}

#[test]
fn a_write_is_refused_at_once_below_the_sets_size_and_after_its_timeout_otherwise() {
    let mut pending = Pending::default();
    pending.hold("a", 1_000, 500);
    assert_eq!(
        pending.settle(1_001, &status(100, 0, 0, 1)),
        vec![(
            "a",
            Settled::TooFew {
                members: 0,
                required: 1
            }
        )]
    );
    pending.hold("b", 1_000, 500);
    assert_eq!(pending.settle(1_499, &status(100, 90, 1, 1)), vec![]);
    assert_eq!(
        pending.settle(1_500, &status(110, 99, 1, 1)),
        vec![("b", Settled::NotAcknowledged { timeout_ms: 500 })]
    );
}

#[test]
fn a_lone_server_counts_at_once_and_a_client_that_left_is_taken_out() {
    let mut pending = Pending::default();
    pending.hold(1, 0, 500);
    pending.hold(2, 0, 500);
    assert_eq!(pending.take(|held| *held == 1), Some(1));
    assert_eq!(pending.take(|held| *held == 1), None);
    assert_eq!(
        pending.settle(1, &status(50, 50, 0, 0)),
        vec![(2, Settled::Counted)]
    );
    pending.hold(3, 0, 500);
    assert_eq!(pending.drain(), vec![3]);
}

#[test]
fn a_master_the_sentinels_replaced_counts_nothing() {
    let mut pending = Pending::default();
    pending.hold("w", 0, 1_000);
    let replaced = Status {
        replaced: true,
        ..status(10, 10, 1, 1)
    };
    assert!(!replaced.counts(10));
    assert_eq!(pending.settle(1, &replaced), [("w", Settled::Replaced)]);
}

#[test]
fn a_look_is_due_for_new_writes_for_what_was_heard_and_every_few_ms() {
    let mut pending = Pending::default();
    assert!(!pending.due(1_000), "nothing held, nothing to look for");
    pending.hold("a", 1_000, 500);
    assert!(pending.due(1_000), "a write held since the last look");
    assert_eq!(pending.settle(1_000, &status(100, 90, 1, 1)), vec![]);
    assert!(pending.ask());
    assert!(
        !pending.due(1_001),
        "nothing new: the status read at 1 000 stands"
    );
    pending.heard();
    assert!(pending.due(1_001), "a replica acknowledged");
    assert_eq!(pending.settle(1_001, &status(100, 95, 1, 1)), vec![]);
    assert!(!pending.due(1_001 + LOOK_EVERY_MS - 1));
    assert!(
        pending.due(1_001 + LOOK_EVERY_MS),
        "time alone may change the status"
    );
    pending.hold("b", 1_002, 500);
    assert!(pending.due(1_002));
}
