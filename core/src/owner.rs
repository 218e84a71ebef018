//! Owner identifiers: who holds a lock. Any bytes, 1 to [`MAX_OWNER_LEN`] of them, stored
//! inline in the lock up to [`INLINE_OWNER_LEN`]. An election's leader also keeps the value it
//! proclaims (`LOCK.CAMPAIGN`, `LOCK.PROCLAIM`) beside its owner, in the same allocation, so a
//! lock that is not an election's pays nothing for it.

use std::fmt;
use std::ops::Deref;

/// Longest owner accepted, in bytes. Owners are usually a UUID or `host:pid:thread`; the cap
/// keeps a lock's memory bounded.
pub const MAX_OWNER_LEN: usize = 256;

/// Owners up to this many bytes live inside the lock itself — a UUID (36 bytes) with a short
/// thread id, as Redisson's owners are — so a typical lock is one 64-byte allocation and a
/// shared holder 72 bytes.
pub const INLINE_OWNER_LEN: usize = 38;

/// Longest value a leader may proclaim, in bytes (64 KiB): an address, or a small JSON
/// document about the leader.
pub const MAX_VALUE_LEN: usize = 65_536;

/// An owner identifier (any bytes), stored inline up to [`INLINE_OWNER_LEN`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum Owner {
    /// A short owner: its length and its bytes, zero-padded.
    Inline {
        /// How many of `bytes` are the owner.
        len: u8,
        /// The owner, then zeros.
        bytes: [u8; INLINE_OWNER_LEN],
    },
    /// A longer owner, on the heap.
    Spilled(Box<[u8]>),
    /// An owner with the value it proclaims as an election's leader: the owner's bytes, then
    /// the value's (not empty), on the heap.
    Proclaiming {
        /// How many of `bytes` are the owner.
        owner_len: u16,
        /// The owner, then the value.
        bytes: Box<[u8]>,
    },
}

impl Owner {
    /// `owner` as stored in a lock.
    #[must_use]
    pub fn new(owner: &[u8]) -> Self {
        let mut bytes = [0; INLINE_OWNER_LEN];
        match (u8::try_from(owner.len()), bytes.get_mut(..owner.len())) {
            (Ok(len), Some(start)) => {
                start.copy_from_slice(owner);
                Self::Inline { len, bytes }
            }
            _ => Self::Spilled(owner.into()),
        }
    }

    /// `owner` as stored in an election's leader that proclaims `value` (`owner` alone when
    /// `value` is empty).
    #[must_use]
    pub fn with_value(owner: &[u8], value: &[u8]) -> Self {
        match u16::try_from(owner.len()) {
            Ok(owner_len) if !value.is_empty() => Self::Proclaiming {
                owner_len,
                bytes: [owner, value].concat().into(),
            },
            _ => Self::new(owner),
        }
    }

    /// The value it proclaims; empty for an owner that proclaims none (every lock's holder
    /// that is not an election's leader).
    #[must_use]
    pub fn value(&self) -> &[u8] {
        match self {
            Self::Proclaiming { owner_len, bytes } => {
                bytes.get(usize::from(*owner_len)..).unwrap_or_default()
            }
            _ => &[],
        }
    }

    /// Heap bytes it owns (for `MEMORY USAGE`): none while inline.
    #[must_use]
    pub fn heap_size(&self) -> usize {
        match self {
            Self::Inline { .. } => 0,
            Self::Spilled(bytes) | Self::Proclaiming { bytes, .. } => bytes.len(),
        }
    }
}

impl Deref for Owner {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            Self::Spilled(owner) => owner,
            Self::Proclaiming { owner_len, bytes } => {
                bytes.get(..usize::from(*owner_len)).unwrap_or(bytes)
            }
        }
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))?;
        if !self.value().is_empty() {
            write!(
                f,
                " proclaiming {:?}",
                String::from_utf8_lossy(self.value())
            )?;
        }
        Ok(())
    }
}

/// Why a value to proclaim was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidValue;

/// Checks that `value` is at most [`MAX_VALUE_LEN`] bytes.
///
/// # Errors
/// [`InvalidValue`] for a longer value.
pub fn check_value(value: &[u8]) -> Result<&[u8], InvalidValue> {
    if value.len() > MAX_VALUE_LEN {
        Err(InvalidValue)
    } else {
        Ok(value)
    }
}

/// Why an owner identifier was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidOwner;

/// Checks that `owner` is 1 to [`MAX_OWNER_LEN`] bytes.
///
/// # Errors
/// [`InvalidOwner`] for an empty or longer owner.
pub fn check_owner(owner: &[u8]) -> Result<&[u8], InvalidOwner> {
    if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
        Err(InvalidOwner)
    } else {
        Ok(owner)
    }
}
