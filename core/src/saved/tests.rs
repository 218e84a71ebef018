use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::tape::{Reader, Writer};
use super::*;
use crate::lock::Mode;
use crate::owner::MAX_VALUE_LEN;

const TOKEN: u64 = 1_795_406_499_228_000;
const DEADLINE: i64 = 1_795_406_560_000;

fn shared(limit: Option<u32>, holders: &[(&str, u64, u32)]) -> Lock {
    let mut lock: Option<Lock> = None;
    for (owner, token, holds) in holders {
        match &mut lock {
            None => {
                let mode = Mode::Shared(limit);
                lock = Some(Lock::new(owner.as_bytes(), *token, *holds, mode, DEADLINE));
            }
            Some(lock) => {
                let holder = Holder::new(owner.as_bytes(), *token, *holds, DEADLINE + 7);
                lock.add_holder(holder);
            }
        }
    }
    lock.expect("holders")
}

/// One lock of each kind the module writes.
fn every_kind() -> Vec<Lock> {
    let long = "o".repeat(256);
    vec![
        Lock::new(b"alice", TOKEN, 1, Mode::Exclusive, 0),
        Lock::new(long.as_bytes(), TOKEN, 3, Mode::Exclusive, 0),
        shared(
            None,
            &[("r1", TOKEN, 1), ("r2", TOKEN + 1, 2), ("r3", TOKEN + 5, 1)],
        ),
        shared(Some(3), &[("p1", TOKEN, 1), (&long, TOKEN + 2, 1)]),
        leader(b"10.0.0.7:6379"),
    ]
}

/// An election's leader, proclaiming `value`.
fn leader(value: &[u8]) -> Lock {
    let mut lock = Lock::new(b"candidate-1", TOKEN, 1, Mode::Exclusive, 0);
    lock.proclaim(TOKEN, value);
    lock
}

fn saved(lock: &Lock) -> Vec<u8> {
    let mut writer = Writer::default();
    save(lock, &mut writer);
    writer.0
}

fn load_bytes(bytes: &[u8]) -> Result<Lock, Invalid> {
    load(ENCODING_VERSION, &mut Reader(bytes))
}

/// The saved form of what `write` writes, read back.
fn written(write: impl FnOnce(&mut Writer)) -> Result<Lock, Invalid> {
    let mut writer = Writer::default();
    write(&mut writer);
    load_bytes(&writer.0)
}

fn holder(w: &mut Writer, owner: &[u8], token: u64, holds: u64, deadline: i64) {
    w.bytes(owner);
    w.unsigned(token);
    w.unsigned(holds);
    w.signed(deadline);
}

#[test]
fn every_kind_round_trips() {
    for lock in every_kind() {
        assert_eq!(load_bytes(&saved(&lock)), Ok(lock));
    }
}

#[test]
fn a_lock_of_0_1_0_loads_as_exclusive() {
    let mut writer = Writer::default();
    writer.bytes(b"owner-from-0.1.0");
    writer.unsigned(TOKEN);
    writer.unsigned(2);
    let lock = load(EXCLUSIVE_ONLY_VERSION, &mut Reader(&writer.0));
    assert_eq!(
        lock,
        Ok(Lock::new(b"owner-from-0.1.0", TOKEN, 2, Mode::Exclusive, 0))
    );
}

#[test]
fn data_cut_short_anywhere_is_refused() {
    for lock in every_kind() {
        let bytes = saved(&lock);
        for end in 0..bytes.len() {
            assert_eq!(
                load_bytes(&bytes[..end]),
                Err(Invalid::ShortRead),
                "cut at {end}"
            );
        }
    }
}

#[test]
fn what_the_module_never_writes_is_refused() {
    let exclusive = |owner: &[u8], token: u64, holds: u64| {
        written(|w| {
            w.unsigned(EXCLUSIVE);
            w.bytes(owner);
            w.unsigned(token);
            w.unsigned(holds);
        })
    };
    assert_eq!(
        exclusive(b"", TOKEN, 1),
        Err(Invalid::Holding),
        "empty owner"
    );
    assert_eq!(
        exclusive(&[b'o'; 257], TOKEN, 1),
        Err(Invalid::Holding),
        "long owner"
    );
    assert_eq!(exclusive(b"a", 0, 1), Err(Invalid::Holding), "token 0");
    assert_eq!(
        exclusive(b"a", 1 << 53, 1),
        Err(Invalid::Holding),
        "token 2^53"
    );
    assert_eq!(exclusive(b"a", TOKEN, 0), Err(Invalid::Holding), "no holds");
    assert_eq!(
        exclusive(b"a", TOKEN, 1 << 32),
        Err(Invalid::Holding),
        "holds 2^32"
    );
    assert!(exclusive(b"a", MAX_TOKEN, u64::from(u32::MAX)).is_ok());

    assert_eq!(written(|w| w.unsigned(3)), Err(Invalid::Kind(3)));
    let leader = |value: &[u8]| {
        written(|w| {
            w.unsigned(LEADER);
            w.bytes(b"a");
            w.unsigned(TOKEN);
            w.unsigned(1);
            w.bytes(value);
        })
    };
    assert_eq!(leader(b""), Err(Invalid::Holding), "a leader with no value");
    assert_eq!(
        leader(&[b'v'; MAX_VALUE_LEN + 1]),
        Err(Invalid::Holding),
        "a value over 64 KiB"
    );
    assert!(leader(&[b'v'; MAX_VALUE_LEN]).is_ok());
    let refused = load(3, &mut Reader(&saved(&every_kind()[0])));
    assert_eq!(refused, Err(Invalid::Encoding(3)));

    let shared_with = |limit: u64, count: u64, holders: &[(&[u8], u64, i64)]| {
        written(|w| {
            w.unsigned(SHARED);
            w.unsigned(limit);
            w.unsigned(count);
            for (owner, token, deadline) in holders {
                holder(w, owner, *token, 1, *deadline);
            }
        })
    };
    let two: [(&[u8], u64, i64); 2] = [(b"a", TOKEN, DEADLINE), (b"b", TOKEN + 1, DEADLINE)];
    assert!(shared_with(2, 2, &two).is_ok());
    assert_eq!(shared_with(1, 2, &two), Err(Invalid::OverLimit));
    assert_eq!(shared_with(0, 0, &[]), Err(Invalid::NoHolders));
    assert_eq!(shared_with(1 << 32, 2, &two), Err(Invalid::Limit(1 << 32)));
    let twice: [(&[u8], u64, i64); 2] = [(b"a", TOKEN, DEADLINE), (b"a", TOKEN + 1, DEADLINE)];
    assert_eq!(shared_with(0, 2, &twice), Err(Invalid::DuplicateOwner));
    let backwards: [(&[u8], u64, i64); 2] = [(b"a", TOKEN + 1, DEADLINE), (b"b", TOKEN, DEADLINE)];
    assert_eq!(shared_with(0, 2, &backwards), Err(Invalid::TokenOrder));
    for deadline in [0, -1, i64::MIN] {
        let holders: [(&[u8], u64, i64); 1] = [(b"a", TOKEN, deadline)];
        assert_eq!(
            shared_with(0, 1, &holders),
            Err(Invalid::Deadline(deadline))
        );
    }
    let huge_count = shared_with(0, u64::MAX, &two);
    assert_eq!(
        huge_count,
        Err(Invalid::ShortRead),
        "a count the data does not have"
    );
}

#[test]
fn the_counter_is_checked() {
    let counter = |version: i32, last: u64| {
        let mut writer = Writer::default();
        writer.unsigned(last);
        load_counter(version, &mut Reader(&writer.0))
    };
    assert_eq!(counter(ENCODING_VERSION, MAX_TOKEN), Ok(MAX_TOKEN));
    assert_eq!(counter(EXCLUSIVE_ONLY_VERSION, 7), Ok(7));
    assert_eq!(
        counter(ENCODING_VERSION, 1 << 53),
        Err(Invalid::Counter(1 << 53))
    );
    assert_eq!(counter(3, 7), Err(Invalid::Encoding(3)));
    assert_eq!(
        load_counter(ENCODING_VERSION, &mut Reader(&[1, 2])),
        Err(Invalid::ShortRead)
    );
}

/// Mutated saved locks and random bytes: each is refused or loads as a lock that saves and
/// loads back the same, with its holders within its limit.
#[test]
fn mutated_data_is_refused_or_a_whole_lock() {
    let mut rng = StdRng::seed_from_u64(27);
    let originals: Vec<Vec<u8>> = every_kind().iter().map(saved).collect();
    for _ in 0..20_000 {
        let mut bytes = originals[rng.random_range(0..originals.len())].clone();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..=bytes.len());
            match rng.random_range(0..4) {
                0 if at < bytes.len() => bytes[at] ^= 1 << rng.random_range(0..8),
                1 if at < bytes.len() => drop(bytes.remove(at)),
                2 => bytes.insert(at, rng.random()),
                _ => bytes.truncate(at),
            }
        }
        if let Ok(lock) = load_bytes(&bytes) {
            assert_eq!(load_bytes(&saved(&lock)).as_ref(), Ok(&lock));
            if let Lock::Shared(shared) = &lock {
                let limit = shared.limit.map_or(usize::MAX, |n| n as usize);
                assert!(shared.holders.len() <= limit);
            }
        }
    }
}
