use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::*;

fn tie(key: &str, owner: &str) -> Tie {
    (0, key.as_bytes().into(), owner.as_bytes().into())
}

/// A registry with one session of user `default` on connection 1, outliving it by `grace_ms`.
fn one_session(grace_ms: u64) -> (Sessions, Id) {
    let mut sessions = Sessions::new(7);
    let id = sessions.open(1, "default", grace_ms);
    (sessions, id)
}

#[test]
fn a_session_ends_a_grace_after_its_connection_closed_unless_attached_again() {
    let (mut sessions, id) = one_session(3_000);
    sessions.tie(id, 0, b"order", b"alice", 0);
    assert_eq!(sessions.detach(1, 10_000), vec![(id, 13_000)]);
    assert_eq!(sessions.counts(), (1, 1));
    assert_eq!(sessions.end_if_due(id, 12_999), None, "still in its grace");
    assert_eq!(
        sessions.end_if_due(id, 13_000),
        Some(vec![tie("order", "alice")])
    );
    assert_eq!(sessions.counts(), (0, 0));
    assert_eq!(
        sessions.attach(id, 2, "default"),
        Err(SessionError::NoSuchSession)
    );
}

#[test]
fn attaching_within_the_grace_keeps_every_tie() {
    let (mut sessions, id) = one_session(3_000);
    sessions.tie(id, 0, b"order", b"alice", 0);
    sessions.detach(1, 10_000);
    assert_eq!(sessions.attach(id, 2, "default"), Ok(3_000));
    assert_eq!(sessions.end_if_due(id, 20_000), None, "attached");
    assert_eq!(sessions.tied_to(0, b"order", b"alice"), Some(id));
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
    let (mut sessions, id) = one_session(500);
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
        sessions.check(id),
        Ok(()),
        "a holding of bob's may be tied to it"
    );
    assert_eq!(sessions.check(id + 1), Err(SessionError::NoSuchSession));
}

#[test]
fn a_holding_has_one_tie_at_most() {
    let mut sessions = Sessions::new(7);
    let first = sessions.open(1, "default", 500);
    let second = sessions.open(2, "default", 500);
    sessions.tie(first, 0, b"order", b"alice", 0);
    sessions.tie(first, 0, b"invoice", b"alice", 0);
    sessions.tie(second, 0, b"order", b"alice", 0);
    assert_eq!(
        sessions.close(first, "default"),
        Ok(vec![tie("invoice", "alice")])
    );
    sessions.untie(0, b"order", b"alice");
    assert_eq!(sessions.close(second, "default"), Ok(vec![]));
}

#[test]
fn clear_forgets_without_ending() {
    let mut sessions = Sessions::new(u64::MAX);
    let id = sessions.open(1, "default", 500);
    assert_eq!(id, u64::MAX);
    assert_eq!(sessions.open(1, "default", 500), 0, "ids wrap");
    sessions.tie(id, 0, b"order", b"alice", 0);
    sessions.clear();
    assert_eq!(sessions.counts(), (0, 0));
    assert_eq!(sessions.detach(1, 0), vec![]);
    assert_eq!(sessions.tied_to(0, b"order", b"alice"), None);
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
fn a_flush_unties_every_holding() {
    let (mut sessions, id) = one_session(500);
    sessions.tie(id, 0, b"order", b"alice", 0);
    sessions.tie(id, 0, b"order", b"bob", 0);
    sessions.untie(0, b"order", b"alice");
    assert_eq!(sessions.tied_to(0, b"order", b"bob"), Some(id));
    sessions.tie(id, 1, b"order", b"alice", 0);
    sessions.untie_all();
    assert!(!sessions.has_ties());
    assert_eq!(sessions.close(id, "default"), Ok(vec![]));
}

#[test]
fn the_sweep_goes_round_every_tie_twice_as_fast_as_ties_are_made() {
    let (mut sessions, id) = one_session(3_000);
    let made = SWEEP_MIN * 3;
    for n in 0..made {
        sessions.tie(id, 0, n.to_string().as_bytes(), b"alice", 0);
    }
    let first = sessions.to_sweep(0);
    assert_eq!(first.len(), made, "every tie, once");
    assert_eq!(sessions.to_sweep(0).len(), SWEEP_MIN, "none made since");
    // Round the registry from where the last sweep stopped, wrapping at its end.
    let mut seen: Vec<Tie> = (0..3).flat_map(|_| sessions.to_sweep(0)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), made, "every tie within one round");
    for (db, key, owner) in first.iter().take(made - 10) {
        sessions.untie(*db, key, owner);
    }
    assert_eq!(sessions.to_sweep(0).len(), 10, "never more than there are");
}

#[test]
fn a_sweep_looks_at_no_more_than_its_most() {
    let (mut sessions, id) = one_session(3_000);
    for n in 0..SWEEP_MAX * 2 {
        sessions.tie(id, 0, n.to_string().as_bytes(), b"alice", 0);
    }
    assert_eq!(sessions.to_sweep(0).len(), SWEEP_MAX);
}

#[test]
fn the_sweep_names_only_ties_whose_lease_end_has_passed() {
    let (mut sessions, id) = one_session(3_000);
    sessions.tie(id, 0, b"order", b"alice", 10_000);
    sessions.tie(id, 0, b"waiting", b"bob", 5_000);
    assert_eq!(sessions.to_sweep(4_999), vec![]);
    assert_eq!(sessions.to_sweep(5_000), vec![tie("waiting", "bob")]);
    // Still held, its lease now ending later; a renewal with the session moves it too.
    sessions.recheck_at(0, b"waiting", b"bob", 20_000);
    sessions.tie(id, 0, b"order", b"alice", 30_000);
    assert_eq!(sessions.to_sweep(19_999), vec![]);
    assert_eq!(sessions.to_sweep(20_000), vec![tie("waiting", "bob")]);
}

/// Each session's ties as its list links them, checking every backward link on the way.
fn listed(sessions: &Sessions, id: Id) -> BTreeSet<Tie> {
    let mut listed = BTreeSet::new();
    let (mut previous, mut index) = (NONE, sessions.sessions[&id].first_tie);
    while index != NONE {
        let (tie, tied) = sessions
            .ties
            .get_index(index)
            .expect("a linked tie is in the map");
        assert_eq!((tied.session, tied.previous), (id, previous), "tie {index}");
        assert!(listed.insert(decode(tie).expect("encoded")), "listed twice");
        (previous, index) = (index, tied.next);
    }
    listed
}

#[test]
fn every_session_lists_exactly_its_ties_under_random_changes() {
    for seed in 0..200 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sessions = Sessions::new(seed);
        let mut model: BTreeMap<Id, BTreeSet<Tie>> = BTreeMap::new();
        for step in 0..300 {
            let open: Vec<Id> = model.keys().copied().collect();
            let key = format!("k{}", rng.random_range(0..12));
            let owner = format!("o{}", rng.random_range(0..3));
            let held = tie(&key, &owner);
            match (rng.random_range(0..10), open.is_empty()) {
                (0, _) | (_, true) => {
                    model.insert(sessions.open(1, "default", 500), BTreeSet::new());
                }
                (1..6, false) => {
                    let id = open[rng.random_range(0..open.len())];
                    sessions.tie(id, 0, key.as_bytes(), owner.as_bytes(), 0);
                    for ties in model.values_mut() {
                        ties.remove(&held);
                    }
                    model.get_mut(&id).expect("open").insert(held);
                }
                (6..8, false) => {
                    sessions.untie(0, key.as_bytes(), owner.as_bytes());
                    for ties in model.values_mut() {
                        ties.remove(&held);
                    }
                }
                (8, false) => {
                    let id = open[rng.random_range(0..open.len())];
                    let ended: BTreeSet<Tie> = sessions
                        .close(id, "default")
                        .expect("open")
                        .into_iter()
                        .collect();
                    assert_eq!(Some(ended), model.remove(&id), "seed {seed} step {step}");
                }
                _ => {
                    sessions.untie_all();
                    model.values_mut().for_each(BTreeSet::clear);
                }
            }
            for (id, ties) in &model {
                assert_eq!(&listed(&sessions, *id), ties, "seed {seed} step {step}");
            }
            let tied: usize = model.values().map(BTreeSet::len).sum();
            assert_eq!(sessions.ties(), tied, "seed {seed} step {step}");
        }
    }
}

#[test]
fn a_sweep_that_wraps_goes_on_from_where_it_wrapped() {
    let (mut sessions, id) = one_session(3_000);
    let made = SWEEP_MIN + SWEEP_MIN / 2;
    for n in 0..made {
        sessions.tie(id, 0, n.to_string().as_bytes(), b"alice", 0);
    }
    sessions.to_sweep(0);
    let first = sessions.to_sweep(0);
    let second = sessions.to_sweep(0);
    let third = sessions.to_sweep(0);
    assert_eq!(first[0], tie("0", "alice"));
    assert_eq!(second[0], tie(&SWEEP_MIN.to_string(), "alice"));
    assert_eq!(
        third[0],
        tie(&(2 * SWEEP_MIN - made).to_string(), "alice"),
        "on from the wrap, not from the start"
    );
}
