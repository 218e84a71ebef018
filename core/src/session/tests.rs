use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::*;

fn tie(key: &str, owner: &str) -> Tie {
    (0, key.as_bytes().into(), owner.as_bytes().into())
}

/// A registry with one session of user `default` on connection 1, outliving it by `grace_ms`.
fn one_session(grace_ms: u64) -> (Sessions, Id, Number) {
    let mut sessions = Sessions::new(7);
    let id = sessions.open(1, "default", grace_ms);
    let number = sessions.number(id).expect("open");
    (sessions, id, number)
}

/// The ties the sweep names at `now_ms`, without their places.
fn swept(sessions: &mut Sessions, now_ms: i64) -> Vec<Tie> {
    let mut ties: Vec<Tie> = sessions
        .to_sweep(now_ms)
        .into_iter()
        .map(|(_, _, tie)| tie)
        .collect();
    ties.sort();
    ties
}

#[test]
fn a_session_ends_a_grace_after_its_connection_closed_unless_attached_again() {
    let (mut sessions, id, number) = one_session(3_000);
    sessions.log(number, 0, b"order", b"alice", 0);
    assert_eq!(sessions.detach(1, 10_000), vec![(id, 13_000)]);
    assert_eq!(sessions.counts(), (1, 1));
    assert_eq!(sessions.end_if_due(id, 12_999), None, "still in its grace");
    assert_eq!(
        sessions.end_if_due(id, 13_000),
        Some((number, vec![tie("order", "alice")]))
    );
    assert_eq!((sessions.counts(), sessions.ties()), ((0, 0), 0));
    assert_eq!(
        sessions.attach(id, 2, "default"),
        Err(SessionError::NoSuchSession)
    );
    assert_eq!(sessions.id_of(number), None, "its number names nothing");
}

#[test]
fn attaching_within_the_grace_keeps_the_session() {
    let (mut sessions, id, number) = one_session(3_000);
    sessions.log(number, 0, b"order", b"alice", 0);
    sessions.detach(1, 10_000);
    assert_eq!(sessions.attach(id, 2, "default"), Ok(3_000));
    assert_eq!(sessions.end_if_due(id, 20_000), None, "attached");
    assert_eq!(sessions.id_of(number), Some(id));
    // Its new connection closing starts a new grace.
    assert_eq!(sessions.detach(2, 30_000), vec![(id, 33_000)]);
    assert_eq!(
        sessions.detach(1, 30_000),
        vec![],
        "no longer its connection"
    );
}

#[test]
fn attaching_from_another_connection_moves_the_session() {
    let (mut sessions, id, _) = one_session(500);
    sessions.attach(id, 2, "default").expect("attached");
    assert_eq!(
        sessions.detach(1, 0),
        vec![],
        "the old connection closing ends nothing"
    );
    assert_eq!(sessions.detach(2, 0), vec![(id, 500)]);
}

#[test]
fn a_session_is_its_users() {
    let mut sessions = Sessions::new(7);
    let id = sessions.open(1, "alice", 500);
    assert_eq!(sessions.attach(id, 2, "bob"), Err(SessionError::OtherUser));
    assert_eq!(sessions.close(id, "bob"), Err(SessionError::OtherUser));
    assert_eq!(
        sessions.number(id),
        Ok(Number::new(7).expect("not 0")),
        "a holding of bob's may be tied to it"
    );
    assert_eq!(sessions.number(id + 1), Err(SessionError::NoSuchSession));
}

#[test]
fn a_number_is_its_ids_low_bits_and_names_that_id_only() {
    let mut sessions = Sessions::new(u64::MAX);
    let id = sessions.open(1, "default", 500);
    assert_eq!(id, u64::MAX);
    assert_eq!(
        sessions.open(1, "default", 500),
        1,
        "ids wrap, past number 0"
    );
    let number = sessions.number(id).expect("open");
    assert_eq!(number.get(), u32::MAX);
    assert_eq!(
        sessions.number(u64::from(u32::MAX)),
        Err(SessionError::NoSuchSession),
        "the same low bits, another id"
    );
}

#[test]
fn clear_forgets_without_ending() {
    let (mut sessions, id, number) = one_session(500);
    sessions.log(number, 0, b"order", b"alice", 0);
    sessions.clear();
    assert_eq!((sessions.counts(), sessions.ties()), ((0, 0), 0));
    assert_eq!(sessions.detach(1, 0), vec![]);
    assert_eq!(sessions.number(id), Err(SessionError::NoSuchSession));
}

#[test]
fn ids_are_sixteen_hexadecimal_digits() {
    assert_eq!(format_id(0xab), "00000000000000ab");
    assert_eq!(parse_id(b"00000000000000ab"), Ok(0xab));
    assert_eq!(parse_id(b"FFFFFFFFFFFFFFFF"), Ok(u64::MAX));
    for bad in [
        &b"ab"[..],
        b"00000000000000abc",
        b"0000000000000-ab",
        b"000000000000000g",
        b"+00000000000000a",
        b"00000000000000\xc3\xa9",
        b"\xff",
    ] {
        assert_eq!(parse_id(bad), Err(SessionError::InvalidId));
    }
}

#[test]
fn the_sweep_goes_round_every_entry_twice_as_fast_as_entries_are_logged() {
    let (mut sessions, _, number) = one_session(3_000);
    let made = SWEEP_MIN * 3;
    for n in 0..made {
        sessions.log(number, 0, n.to_string().as_bytes(), b"alice", 0);
    }
    let first = sessions.to_sweep(0);
    assert_eq!(first.len(), made, "every entry, once");
    assert_eq!(sessions.to_sweep(0).len(), SWEEP_MIN, "none logged since");
    // Round the logs from where the last sweep stopped, wrapping at the end.
    let mut seen: Vec<Tie> = (0..3).flat_map(|_| swept(&mut sessions, 0)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), made, "every entry within one round");
    for (number, place, _) in first.into_iter().take(made - 10) {
        sessions.drop_entry(number, place);
    }
    assert_eq!(sessions.ties(), 10);
    assert_eq!(sessions.to_sweep(0).len(), 10, "never more than there are");
}

#[test]
fn a_sweep_looks_at_no_more_than_its_most() {
    let (mut sessions, _, number) = one_session(3_000);
    for n in 0..SWEEP_MAX * 2 {
        sessions.log(number, 0, n.to_string().as_bytes(), b"alice", 0);
    }
    assert_eq!(sessions.to_sweep(0).len(), SWEEP_MAX);
}

#[test]
fn the_sweep_goes_round_every_session() {
    let mut sessions = Sessions::new(7);
    let numbers: Vec<Number> = (0..3)
        .map(|client| {
            let id = sessions.open(client, "default", 500);
            sessions.number(id).expect("open")
        })
        .collect();
    for (n, number) in numbers.iter().enumerate() {
        for k in 0..SWEEP_MIN {
            sessions.log(*number, 0, format!("{n}-{k}").as_bytes(), b"alice", 0);
        }
    }
    let first = sessions.to_sweep(0);
    assert_eq!(first.len(), 3 * SWEEP_MIN);
    let mut seen: Vec<Tie> = (0..3).flat_map(|_| swept(&mut sessions, 0)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen.len(),
        3 * SWEEP_MIN,
        "a session at a time, each in turn"
    );
}

#[test]
fn the_sweep_names_only_entries_whose_lease_end_has_passed() {
    let (mut sessions, _, number) = one_session(3_000);
    sessions.log(number, 0, b"order", b"alice", 10_000);
    sessions.log(number, 0, b"waiting", b"bob", 5_000);
    assert_eq!(swept(&mut sessions, 4_999), vec![]);
    let due = sessions.to_sweep(5_000);
    assert_eq!(due, vec![(number, 1, tie("waiting", "bob"))]);
    // Still tied, its lease now ending later.
    sessions.recheck_at(number, 1, 20_000);
    assert_eq!(swept(&mut sessions, 19_999), vec![tie("order", "alice")]);
    assert_eq!(swept(&mut sessions, 20_000).len(), 2);
}

/// Sessions logging, the sweep dropping what it names and sessions ending, in random order: each session ends with exactly what it logged and the sweep did not drop.
#[test]
fn a_session_ends_with_what_it_logged_less_what_the_sweep_dropped() {
    for seed in 0..200 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sessions = Sessions::new(seed);
        let mut model: BTreeMap<Id, Vec<Tie>> = BTreeMap::new();
        for step in 0..300 {
            let open: Vec<Id> = model.keys().copied().collect();
            match (rng.random_range(0..10), open.is_empty()) {
                (0, _) | (_, true) => {
                    model.insert(sessions.open(1, "default", 500), Vec::new());
                }
                (1..6, false) => {
                    let id = open[rng.random_range(0..open.len())];
                    let key = format!("k{}", rng.random_range(0..12));
                    let number = sessions.number(id).expect("open");
                    sessions.log(number, 0, key.as_bytes(), b"o", rng.random_range(0..9));
                    model.get_mut(&id).expect("open").push(tie(&key, "o"));
                }
                (6..8, false) => {
                    let now = rng.random_range(0..10);
                    for (number, place, tie) in sessions.to_sweep(now) {
                        let id = sessions.id_of(number).expect("open");
                        if rng.random_bool(0.5) {
                            sessions.drop_entry(number, place);
                            let log = model.get_mut(&id).expect("open");
                            let at = log.iter().position(|t| *t == tie).expect("logged");
                            log.remove(at);
                        } else {
                            sessions.recheck_at(number, place, now + 5);
                        }
                    }
                }
                (_, false) => {
                    let id = open[rng.random_range(0..open.len())];
                    let (_, mut ended) = sessions.close(id, "default").expect("open");
                    let mut expected = model.remove(&id).expect("open");
                    ended.sort();
                    expected.sort();
                    assert_eq!(ended, expected, "seed {seed} step {step}");
                }
            }
            let logged: usize = model.values().map(Vec::len).sum();
            assert_eq!(sessions.ties(), logged, "seed {seed} step {step}");
        }
    }
}
