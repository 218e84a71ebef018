use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::*;

fn entry(key: &str) -> Entry {
    (0, key.as_bytes().into())
}

/// Logs a holding of `key` in database 0. Returns its tie.
fn log(sessions: &mut Sessions, number: Number, key: &[u8], until_ms: i64) -> Tie {
    sessions.log(number, 0, key, until_ms).expect("open")
}

/// A registry with one session of user `default` on connection 1, outliving it by `grace_ms`.
fn one_session(grace_ms: u64) -> (Sessions, Id, Number) {
    let mut sessions = Sessions::new(7);
    let id = sessions.open(1, "default", grace_ms);
    let number = sessions.number(id).expect("open");
    (sessions, id, number)
}

/// The entries the sweep names at `now_ms`, without their ties.
fn swept(sessions: &mut Sessions, now_ms: i64) -> Vec<Entry> {
    let mut entries: Vec<Entry> = sessions
        .to_sweep(now_ms)
        .into_iter()
        .map(|(_, entry)| entry)
        .collect();
    entries.sort();
    entries
}

#[test]
fn a_session_ends_a_grace_after_its_connection_closed_unless_attached_again() {
    let (mut sessions, id, number) = one_session(3_000);
    log(&mut sessions, number, b"order", 0);
    assert_eq!(sessions.detach(1, 10_000), vec![(id, 13_000)]);
    assert_eq!(sessions.counts(), (1, 1));
    assert_eq!(sessions.end_if_due(id, 12_999), None, "still in its grace");
    assert_eq!(
        sessions.end_if_due(id, 13_000),
        Some(vec![(Tie { number, place: 0 }, entry("order"))])
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
    log(&mut sessions, number, b"order", 0);
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
fn a_connection_uses_a_session_until_it_closes_and_detaches_nothing() {
    let (mut sessions, id, _) = one_session(500);
    assert_eq!(sessions.used_by(|| Some(2)), None);
    assert_eq!(sessions.use_session(2, Some(id)), Ok(()));
    assert_eq!(sessions.used_by(|| Some(2)), Some(id));
    assert_eq!(sessions.used_by(|| Some(3)), None);
    assert_eq!(
        sessions.use_session(2, Some(id + 1)),
        Err(SessionError::NoSuchSession)
    );
    assert_eq!(sessions.used_by(|| Some(2)), Some(id), "unchanged");
    assert_eq!(sessions.detach(2, 0), vec![], "the session stays attached");
    assert_eq!((sessions.used_by(|| Some(2)), sessions.users()), (None, 0));
    sessions.use_session(3, Some(id)).expect("open");
    sessions.use_session(3, None).expect("none");
    assert_eq!(sessions.users(), 0);
}

#[test]
fn a_connection_keeps_the_session_it_used_after_it_ended() {
    let (mut sessions, id, _) = one_session(500);
    sessions.use_session(2, Some(id)).expect("open");
    sessions.close(id, "default").expect("open");
    assert_eq!(sessions.used_by(|| Some(2)), Some(id));
    assert_eq!(sessions.number(id), Err(SessionError::NoSuchSession));
    let other = sessions.open(1, "default", 500);
    sessions.clear();
    sessions.use_session(4, Some(other)).expect_err("forgotten");
    assert_eq!(
        sessions.used_by(|| Some(2)),
        Some(id),
        "refused, not untied"
    );
}

#[test]
fn no_connection_is_asked_for_while_none_uses_a_session() {
    let (sessions, _, _) = one_session(500);
    assert_eq!(
        sessions.used_by(|| unreachable!("no client id needed")),
        None
    );
}

#[test]
fn clear_forgets_without_ending() {
    let (mut sessions, id, number) = one_session(500);
    log(&mut sessions, number, b"order", 0);
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
        log(&mut sessions, number, n.to_string().as_bytes(), 0);
    }
    let first = sessions.to_sweep(0);
    assert_eq!(first.len(), made, "every entry, once");
    assert_eq!(sessions.to_sweep(0).len(), SWEEP_MIN, "none logged since");
    // Round the logs from where the last sweep stopped, wrapping at the end.
    let mut seen: Vec<Entry> = (0..3).flat_map(|_| swept(&mut sessions, 0)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), made, "every entry within one round");
    for (tie, _) in first.into_iter().take(made - 10) {
        sessions.drop_entry(tie);
    }
    assert_eq!(sessions.ties(), 10);
    let mut left: Vec<Entry> = (0..3).flat_map(|_| swept(&mut sessions, 0)).collect();
    left.sort();
    left.dedup();
    assert_eq!(left.len(), 10, "the freed places are passed over");
}

#[test]
fn a_sweep_looks_at_no_more_than_its_most() {
    let (mut sessions, _, number) = one_session(3_000);
    for n in 0..SWEEP_MAX * 2 {
        log(&mut sessions, number, n.to_string().as_bytes(), 0);
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
            log(&mut sessions, *number, format!("{n}-{k}").as_bytes(), 0);
        }
    }
    let first = sessions.to_sweep(0);
    assert_eq!(first.len(), 3 * SWEEP_MIN);
    let mut seen: Vec<Entry> = (0..3).flat_map(|_| swept(&mut sessions, 0)).collect();
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
    log(&mut sessions, number, b"order", 10_000);
    log(&mut sessions, number, b"waiting", 5_000);
    assert_eq!(swept(&mut sessions, 4_999), vec![]);
    let waiting = Tie { number, place: 1 };
    assert_eq!(sessions.to_sweep(5_000), vec![(waiting, entry("waiting"))]);
    // Still tied, its lease now ending later.
    sessions.recheck_at(waiting, 20_000);
    assert_eq!(swept(&mut sessions, 19_999), vec![entry("order")]);
    assert_eq!(swept(&mut sessions, 20_000).len(), 2);
    // Lease ends are kept to the second, rounded up: looked up a little later, never sooner.
    let late = log(&mut sessions, number, b"late", 30_001);
    assert_eq!(swept(&mut sessions, 30_999).len(), 2);
    assert_eq!(sessions.to_sweep(31_000).len(), 3);
    sessions.drop_entry(late);
}

/// Sessions logging (and freeing what no holding took), holdings ending, the
/// sweep dropping what it names and sessions ending, in random order: every entry stays at its
/// place until it is freed, and each session ends with exactly the entries it still has.
#[test]
fn entries_keep_their_places_until_freed() {
    for seed in 0..200 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sessions = Sessions::new(seed);
        let mut model: BTreeMap<Id, BTreeMap<u32, Entry>> = BTreeMap::new();
        for step in 0..300 {
            let open: Vec<Id> = model.keys().copied().collect();
            let Some(&id) = open.get(rng.random_range(0..open.len().max(1))) else {
                model.insert(sessions.open(1, "default", 500), BTreeMap::new());
                continue;
            };
            let number = sessions.number(id).expect("open");
            let log_of = model.get_mut(&id).expect("open");
            let op = rng.random_range(0..10);
            match op {
                0 => {
                    model.insert(sessions.open(1, "default", 500), BTreeMap::new());
                }
                1..5 => {
                    let key = format!("k{}", rng.random_range(0..12));
                    let tie = log(&mut sessions, number, key.as_bytes(), 5);
                    assert_eq!(log_of.insert(tie.place, entry(&key)), None, "a free place");
                }
                5 => {
                    // Logged by a command that did not tie the holding with it.
                    let tie = log(&mut sessions, number, b"unused", 5);
                    assert!(!log_of.contains_key(&tie.place), "a free place");
                    sessions.free(tie, 0, b"unused");
                }
                6 => {
                    // A holding ends: its entry goes, not one naming another key or database.
                    let Some((&place, (db, key))) = log_of.iter().next() else {
                        continue;
                    };
                    let (tie, before) = (Tie { number, place }, sessions.ties());
                    sessions.free(tie, db + 1, key);
                    sessions.free(tie, *db, b"another key");
                    assert_eq!(sessions.ties(), before, "not another holding's");
                    sessions.free(tie, *db, key);
                    log_of.remove(&place);
                }
                7 | 8 => {
                    let now = rng.random_range(0..10);
                    for (tie, found) in sessions.to_sweep(now) {
                        let id = sessions.id_of(tie.number).expect("open");
                        let log_of = model.get_mut(&id).expect("open");
                        assert_eq!(
                            log_of.get(&tie.place),
                            Some(&found),
                            "seed {seed} step {step}"
                        );
                        if rng.random_bool(0.5) {
                            sessions.drop_entry(tie);
                            log_of.remove(&tie.place);
                        } else {
                            sessions.recheck_at(tie, now + 5);
                        }
                    }
                }
                _ => {
                    let ended = sessions.close(id, "default").expect("open");
                    let expected = model.remove(&id).expect("open");
                    let ended: BTreeMap<u32, Entry> = ended
                        .into_iter()
                        .map(|(tie, entry)| (tie.place, entry))
                        .collect();
                    assert_eq!(ended, expected, "seed {seed} step {step}");
                }
            }
            let logged: usize = model.values().map(BTreeMap::len).sum();
            assert_eq!(sessions.ties(), logged, "seed {seed} step {step}");
        }
    }
}
