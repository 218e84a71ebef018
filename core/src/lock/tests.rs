use super::*;
use crate::owner::{InvalidOwner, MAX_OWNER_LEN, Owner, check_owner};

const NOW: i64 = 1_763_800_000_000;
const UUID: &str = "8d3c2f4e-1b2a-4c5d-9e8f-0a1b2c3d4e5f:1"; // 38 bytes, as Redisson's

fn exclusive(owner: &str, token: u64, holds: u32) -> Lock {
    Lock::new(owner.as_bytes(), token, holds, Mode::Exclusive, 0)
}

fn shared(limit: Option<u32>, holders: &[(&str, u64)]) -> Lock {
    let mut lock = Lock::new(
        holders[0].0.as_bytes(),
        holders[0].1,
        1,
        Mode::Shared(limit),
        NOW + 1_000,
    );
    for (owner, token) in &holders[1..] {
        lock.add_holder(Holder::new(owner.as_bytes(), *token, 1, NOW + 1_000));
    }
    lock
}

fn decide(lock: &Lock, owner: &str, mode: Mode, reentrant: bool) -> Acquire {
    acquire(Some(lock), owner.as_bytes(), mode, reentrant, false)
}

#[test]
fn owner_must_be_1_to_256_bytes() {
    assert_eq!(check_owner(b""), Err(InvalidOwner));
    assert!(check_owner(b"a").is_ok());
    assert!(check_owner(&[b'x'; MAX_OWNER_LEN]).is_ok());
    assert_eq!(check_owner(&[b'x'; MAX_OWNER_LEN + 1]), Err(InvalidOwner));
    assert!(check_owner(&[0, 255, 10]).is_ok(), "owners are binary-safe");
}

#[test]
fn a_typical_owner_lives_inside_a_64_byte_lock_and_a_72_byte_holder() {
    assert_eq!(size_of::<Owner>(), 40);
    assert_eq!(
        size_of::<Lock>(),
        64,
        "the owner's tag leaves room for the lock's"
    );
    assert_eq!(
        size_of::<Holder>(),
        72,
        "a session number and padding past 64"
    );
    assert_eq!(exclusive(UUID, 1, 1).heap_size(), 0);
    assert_eq!(&*Owner::new(UUID.as_bytes()), UUID.as_bytes());
    let long = "x".repeat(100);
    assert_eq!(exclusive(&long, 1, 1).heap_size(), 100);
    assert_eq!(&*Owner::new(long.as_bytes()), long.as_bytes());
}

#[test]
fn only_holdings_a_server_could_have_written_are_taken_in() {
    let holding = |owner: &str, token, holds| Holding {
        owner: Owner::new(owner.as_bytes()),
        token,
        holds,
        tie: None,
    };
    assert_eq!(
        Holding::from_parts(b"a", b"", 7, 2),
        Some(holding("a", 7, 2))
    );
    assert_eq!(Holding::from_parts(b"", b"", 7, 1), None, "no owner");
    assert_eq!(
        Holding::from_parts(&[b'x'; MAX_OWNER_LEN + 1], b"", 7, 1),
        None
    );
    assert_eq!(
        Holding::from_parts(b"a", b"", 0, 1),
        None,
        "tokens start at 1"
    );
    assert_eq!(
        Holding::from_parts(b"a", b"", MAX_TOKEN + 1, 1),
        None,
        "below 2^53"
    );
    assert_eq!(
        Holding::from_parts(b"a", b"", 7, 0),
        None,
        "a holding has a hold"
    );
    assert_eq!(
        Holding::from_parts(b"a", b"", 7, u64::from(u32::MAX) + 1),
        None
    );
}

#[test]
fn a_free_lock_is_granted_unless_others_queue_for_it() {
    for mode in [Mode::Exclusive, Mode::Shared(None), Mode::Shared(Some(3))] {
        assert_eq!(acquire(None, b"a", mode, false, false), Acquire::New);
        assert_eq!(acquire(None, b"a", mode, true, true), Acquire::Busy);
    }
}

#[test]
fn the_exclusive_holder_again_keeps_its_token() {
    let lock = exclusive("a", 7, 2);
    assert_eq!(
        decide(&lock, "a", Mode::Exclusive, false),
        Acquire::Again { token: 7, holds: 2 },
        "a retried acquire does not change the hold count"
    );
    assert_eq!(
        decide(&lock, "a", Mode::Exclusive, true),
        Acquire::Again { token: 7, holds: 3 }
    );
    let nested = exclusive("a", 7, u32::MAX);
    assert_eq!(
        decide(&nested, "a", Mode::Exclusive, true),
        Acquire::Again {
            token: 7,
            holds: u32::MAX
        },
        "re-entry saturates"
    );
}

#[test]
fn another_owner_waits_for_an_exclusive_holder_in_either_mode() {
    let lock = exclusive("a", 7, 1);
    for mode in [Mode::Exclusive, Mode::Shared(None), Mode::Shared(Some(2))] {
        assert_eq!(decide(&lock, "b", mode, true), Acquire::Busy);
        assert_eq!(decide(&lock, "A", mode, false), Acquire::Busy);
    }
}

#[test]
fn readers_share_until_the_limit_and_never_past_a_queue() {
    let lock = shared(Some(2), &[("a", 7)]);
    let reader = Mode::Shared(Some(2));
    assert_eq!(decide(&lock, "b", reader, false), Acquire::New);
    assert_eq!(
        acquire(Some(&lock), b"b", reader, false, true),
        Acquire::Busy,
        "no barging past a queued request"
    );
    let full = shared(Some(2), &[("a", 7), ("b", 8)]);
    assert_eq!(decide(&full, "c", reader, false), Acquire::Busy);
    let unlimited = shared(None, &[("a", 7), ("b", 8)]);
    assert_eq!(
        decide(&unlimited, "c", Mode::Shared(None), false),
        Acquire::New
    );
    assert_eq!(
        decide(&unlimited, "c", Mode::Exclusive, false),
        Acquire::Busy,
        "a writer waits for every reader"
    );
}

#[test]
fn a_shared_holder_again_keeps_its_token() {
    let lock = shared(None, &[("a", 7), ("b", 8)]);
    assert_eq!(
        decide(&lock, "b", Mode::Shared(None), true),
        Acquire::Again { token: 8, holds: 2 }
    );
    assert_eq!(
        acquire(Some(&lock), b"b", Mode::Shared(None), false, true),
        Acquire::Again { token: 8, holds: 1 },
        "a holder repeating its request is not a newcomer"
    );
}

#[test]
fn a_different_limit_is_an_error() {
    let semaphore = shared(Some(3), &[("a", 7)]);
    assert_eq!(
        decide(&semaphore, "b", Mode::Shared(Some(4)), false),
        Acquire::LimitDiffers { limit: Some(3) }
    );
    assert_eq!(
        decide(&semaphore, "a", Mode::Shared(None), false),
        Acquire::LimitDiffers { limit: Some(3) },
        "even for a holder"
    );
    let readers = shared(None, &[("a", 7)]);
    assert_eq!(
        decide(&readers, "b", Mode::Shared(Some(3)), false),
        Acquire::LimitDiffers { limit: None }
    );
}

#[test]
fn the_writer_downgrades_to_a_reader_with_its_token() {
    let mut lock = exclusive("a", 7, 2);
    let decision = decide(&lock, "a", Mode::Shared(Some(5)), true);
    assert_eq!(decision, Acquire::Downgrade { holds: 3 });
    assert_eq!(
        grant(
            Some(&mut lock),
            b"a",
            Mode::Shared(Some(5)),
            decision,
            0,
            NOW + 10
        ),
        None
    );
    let Lock::Shared(shared) = &lock else {
        panic!("{lock:?}");
    };
    assert_eq!(shared.limit, Some(5));
    let holder = shared.holders.get(b"a").cloned();
    assert_eq!(
        holder.map(|h| (h.token, h.holds, h.deadline_ms)),
        Some((7, 3, NOW + 10))
    );
}

#[test]
fn only_the_only_reader_upgrades_with_a_new_token() {
    let mut alone = shared(None, &[("a", 7)]);
    let decision = decide(&alone, "a", Mode::Exclusive, false);
    assert_eq!(decision, Acquire::Upgrade { holds: 1 });
    assert!(decision.needs_token());
    grant(Some(&mut alone), b"a", Mode::Exclusive, decision, 9, NOW);
    assert_eq!(alone, exclusive("a", 9, 1));
    let together = shared(None, &[("a", 7), ("b", 8)]);
    assert_eq!(
        decide(&together, "a", Mode::Exclusive, false),
        Acquire::UpgradeRefused
    );
}

#[test]
fn release_counts_down_then_frees_or_leaves() {
    assert_eq!(
        release(Some(&exclusive("a", 7, 3)), b"a", false),
        Release::Decremented { holds: 2 }
    );
    assert_eq!(
        release(Some(&exclusive("a", 7, 1)), b"a", false),
        Release::Freed
    );
    let readers = shared(None, &[("a", 7), ("b", 8)]);
    assert_eq!(release(Some(&readers), b"a", false), Release::Left);
    assert_eq!(
        release(Some(&shared(None, &[("a", 7)])), b"a", false),
        Release::Freed
    );
}

#[test]
fn a_whole_release_ends_every_hold() {
    assert_eq!(
        release(Some(&exclusive("a", 7, 3)), b"a", true),
        Release::Freed
    );
    let readers = shared(None, &[("a", 7), ("b", 8)]);
    assert_eq!(release(Some(&readers), b"a", true), Release::Left);
}

#[test]
fn release_tells_missing_from_held_by_other() {
    assert_eq!(release(None, b"a", false), Release::Missing);
    assert_eq!(
        release(Some(&exclusive("a", 7, 1)), b"b", false),
        Release::HeldByOther
    );
    assert_eq!(
        release(Some(&shared(None, &[("a", 7)])), b"b", false),
        Release::HeldByOther
    );
}

#[test]
fn renew_only_by_a_holder() {
    assert_eq!(renew(Some(&exclusive("a", 7, 1)), b"a"), Renew::Renewed);
    assert_eq!(renew(Some(&exclusive("a", 7, 1)), b"b"), Renew::HeldByOther);
    assert_eq!(
        renew(Some(&shared(None, &[("a", 7), ("b", 8)])), b"b"),
        Renew::Renewed
    );
    assert_eq!(
        renew(Some(&shared(None, &[("a", 7)])), b"c"),
        Renew::HeldByOther
    );
    assert_eq!(renew(None, b"a"), Renew::Missing);
}

#[test]
fn fences_read_live_holders_only() {
    let mut lock = shared(None, &[("a", 7), ("b", 8)]);
    lock.set_holds(b"b", 1, Some(NOW - 1));
    assert_eq!(lock.token_of(b"a", NOW), Some(7));
    assert_eq!(lock.token_of(b"b", NOW), None, "its lease ended");
    assert_eq!(lock.newest_token(NOW), Some(7));
    assert_eq!(lock.newest_token(NOW - 5), Some(8));
    assert_eq!(lock.shared_deadline(), Some(NOW + 1_000));
}

#[test]
fn a_tie_names_the_holding_that_keeps_it() {
    let tie = |place| Tie {
        number: crate::session::Number::new(1).expect("not 0"),
        place,
    };
    let mut lock = shared(None, &[("a", 7), ("b", 8)]);
    lock.tie(b"a", Some(tie(0)));
    lock.tie(b"b", Some(tie(1)));
    assert_eq!(lock.keeper(tie(1)), Some(&b"b"[..]));
    lock.tie(b"b", None);
    assert_eq!(lock.keeper(tie(1)), None, "untied");
    let held = exclusive("a", 7, 1);
    assert_eq!(held.keeper(tie(0)), None, "never tied");
}
