//! A plain byte encoding of [`Source`] and [`Sink`], for tests and fuzzing without a server:
//! numbers as 8 little-endian bytes, strings as a 4-byte little-endian length and the bytes.
//! Any bytes can be read; reading past the end is a short read, as in an RDB.

use super::{Sink, Source};

/// Reads saved data from bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(taken)
    }

    fn eight(&mut self) -> Option<[u8; 8]> {
        self.take(8)?.try_into().ok()
    }
}

impl Source for Reader<'_> {
    type Bytes = Vec<u8>;

    fn unsigned(&mut self) -> Option<u64> {
        self.eight().map(u64::from_le_bytes)
    }

    fn signed(&mut self) -> Option<i64> {
        self.eight().map(i64::from_le_bytes)
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = self.take(4)?.try_into().ok().map(u32::from_le_bytes)?;
        self.take(usize::try_from(len).ok()?).map(<[u8]>::to_vec)
    }
}

/// Writes saved data as bytes.
#[derive(Debug, Clone, Default)]
pub struct Writer(pub Vec<u8>);

impl Sink for Writer {
    fn unsigned(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn signed(&mut self, value: i64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn bytes(&mut self, value: &[u8]) {
        let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
        self.0.extend_from_slice(&len.to_le_bytes());
        let kept = usize::try_from(len).unwrap_or(usize::MAX);
        self.0.extend_from_slice(value.get(..kept).unwrap_or(value));
    }
}
