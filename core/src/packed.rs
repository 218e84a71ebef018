//! The packed form of a holding's numbers in a `LOCK.APPLY` effect: its fencing token, hold
//! count and lease as one 25-byte binary argument (`LOCK.APPLY key owner <packed>`), instead of
//! three to five integer strings. `RedisModule_Replicate` turns each integer into a string
//! object of its own; one binary argument is one object, and no decimal formatting.
//!
//! Layout (little-endian): a kind byte — 1 an exclusive holding whose lease ends at the
//! deadline, 2 an exclusive holding that keeps its lease, 3 a shared holding — then the token
//! (8 bytes), the hold count (4), the deadline in unix ms (8, signed) and the shared lock's
//! limit (4, 0 for none). The kind bytes are below every printable character, so a packed
//! argument is never taken for the decimal token or the `DROP` of the older forms, which
//! still apply (AOF files written before).

use crate::outcome::Lease;

/// Bytes in a packed holding.
pub const PACKED_LEN: usize = 25;

const UNTIL: u8 = 1;
const KEPT: u8 = 2;
const SHARED: u8 = 3;

/// A holding's token, hold count and lease, packed.
#[must_use]
pub fn pack(token: u64, holds: u32, lease: Lease) -> [u8; PACKED_LEN] {
    let (kind, deadline, limit) = match lease {
        Lease::Until(deadline) => (UNTIL, deadline, 0),
        Lease::Kept => (KEPT, 0, 0),
        Lease::Shared { deadline_ms, limit } => (SHARED, deadline_ms, limit.unwrap_or(0)),
    };
    let mut packed = [0; PACKED_LEN];
    packed[0] = kind;
    packed[1..9].copy_from_slice(&token.to_le_bytes());
    packed[9..13].copy_from_slice(&holds.to_le_bytes());
    packed[13..21].copy_from_slice(&deadline.to_le_bytes());
    packed[21..25].copy_from_slice(&limit.to_le_bytes());
    packed
}

/// The token, hold count and lease of a packed holding; `None` when `bytes` is not one.
#[must_use]
pub fn unpack(bytes: &[u8]) -> Option<(u64, u32, Lease)> {
    let bytes: &[u8; PACKED_LEN] = bytes.try_into().ok()?;
    let (kind, rest) = bytes.split_first()?;
    let (token, rest) = rest.split_first_chunk::<8>()?;
    let (holds, rest) = rest.split_first_chunk::<4>()?;
    let (deadline, rest) = rest.split_first_chunk::<8>()?;
    let limit = rest.first_chunk::<4>()?;
    let deadline = i64::from_le_bytes(*deadline);
    let lease = match *kind {
        UNTIL => Lease::Until(deadline),
        KEPT => Lease::Kept,
        SHARED => Lease::Shared {
            deadline_ms: deadline,
            limit: Some(u32::from_le_bytes(*limit)).filter(|n| *n > 0),
        },
        _ => return None,
    };
    Some((
        u64::from_le_bytes(*token),
        u32::from_le_bytes(*holds),
        lease,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lease_round_trips() {
        for lease in [
            Lease::Until(1_763_800_000_123),
            Lease::Kept,
            Lease::Shared {
                deadline_ms: -1,
                limit: None,
            },
            Lease::Shared {
                deadline_ms: 1_763_800_000_123,
                limit: Some(3),
            },
        ] {
            let packed = pack(9_007_199_254_740_991, u32::MAX, lease);
            assert_eq!(
                unpack(&packed),
                Some((9_007_199_254_740_991, u32::MAX, lease))
            );
        }
    }

    #[test]
    fn the_older_forms_are_not_packed() {
        assert_eq!(unpack(b"1763800000123000"), None);
        assert_eq!(unpack(b"DROP"), None);
        let mut packed = pack(1, 1, Lease::Kept);
        packed[0] = b'1';
        assert_eq!(unpack(&packed), None, "a kind byte that is a digit");
        assert_eq!(unpack(&packed[..24]), None, "short");
    }
}
