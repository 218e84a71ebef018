//! `LOCK.APPLY` effects as a replica or an AOF replay carries them out: any sequence of them
//! is parsed (`leasehold_core::args::apply`: the packed form with or without a leader's
//! `VALUE`, the integer forms, `DROP`, and arguments of any bytes) and applied to one lock (`leasehold_core::machine::apply`). Nothing
//! panics, the counter never goes back, and the lock is always one the RDB can save and load
//! back the same.
#![no_main]

use arbitrary::Arbitrary;
use leasehold_core::args;
use leasehold_core::fence::Counter;
use leasehold_core::lock::Lock;
use leasehold_core::machine;
use leasehold_core::outcome::Lease;
use leasehold_core::packed;
use leasehold_core::saved::tape::{Reader, Writer};
use leasehold_core::saved::{ENCODING_VERSION, load, save};
use libfuzzer_sys::fuzz_target;

/// One effect; owners are one of four, so that effects meet on the same holdings.
#[derive(Debug, Arbitrary)]
enum Effect {
    /// `LOCK.APPLY k <owner> <packed> [VALUE v]`, as masters send it.
    Packed {
        owner: u8,
        token: u64,
        holds: u32,
        lease: Kind,
        deadline: i64,
        limit: Option<u32>,
        value: Option<Vec<u8>>,
    },
    /// `LOCK.APPLY k <owner> token holds [deadline] [SHARED limit]`, as AOF rewrites write it.
    Integers {
        owner: u8,
        token: u64,
        holds: u64,
        deadline: Option<i64>,
        shared: Option<i64>,
    },
    /// `LOCK.APPLY k <owner> DROP`.
    Drop { owner: u8 },
    /// Any arguments after `LOCK.APPLY`.
    Raw(Vec<Vec<u8>>),
}

#[derive(Debug, Arbitrary)]
enum Kind {
    Until,
    Kept,
    Shared,
}

impl Effect {
    fn words(self) -> Vec<Vec<u8>> {
        let name = |owner: u8| format!("owner-{}", owner % 4).into_bytes();
        let mut words = vec![b"LOCK.APPLY".to_vec(), b"k".to_vec()];
        match self {
            Self::Packed {
                owner,
                token,
                holds,
                lease,
                deadline,
                limit,
                value,
            } => {
                let lease = match lease {
                    Kind::Until => Lease::Until(deadline),
                    Kind::Kept => Lease::Kept,
                    Kind::Shared => Lease::Shared {
                        deadline_ms: deadline,
                        limit: limit.map(|limit| limit % 4),
                    },
                };
                words.push(name(owner));
                words.push(packed::pack(token % 100, holds, lease).to_vec());
                if let Some(value) = value {
                    words.extend([b"VALUE".to_vec(), value]);
                }
            }
            Self::Integers {
                owner,
                token,
                holds,
                deadline,
                shared,
            } => {
                words.push(name(owner));
                words.push((token % 100).to_string().into_bytes());
                words.push(holds.to_string().into_bytes());
                words.extend(deadline.map(|deadline| deadline.to_string().into_bytes()));
                if let Some(limit) = shared {
                    words.push(b"SHARED".to_vec());
                    words.push((limit % 4).to_string().into_bytes());
                }
            }
            Self::Drop { owner } => {
                words.push(name(owner));
                words.push(b"DROP".to_vec());
            }
            Self::Raw(raw) => words.extend(raw),
        }
        words
    }
}

fuzz_target!(|effects: Vec<Effect>| {
    let (mut lock, mut counter): (Option<Lock>, Counter) = (None, Counter::new());
    for effect in effects {
        let words = effect.words();
        let Ok(apply) = args::apply(&words) else {
            continue;
        };
        let before = counter.last();
        let _ = machine::apply(&mut lock, &mut counter, apply.effect);
        assert!(counter.last() >= before);
        if let Some(lock) = &lock {
            let mut writer = Writer::default();
            save(lock, &mut writer);
            assert_eq!(
                load(ENCODING_VERSION, &mut Reader(&writer.0)).as_ref(),
                Ok(lock)
            );
        }
    }
});
