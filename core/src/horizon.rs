//! The lease horizon: how far the leases a master granted reach, kept where a crash of the
//! process cannot lose it, so that a master back without its grants grants nothing a holder may
//! still count on — the delayed restart of the Redlock analysis (Kleppmann, "How to do
//! distributed locking", 2016; antirez, "Is Redlock safe?"), sized and switched on by the
//! module itself.
//!
//! - **The record.** Before the reply of a grant or renewal whose lease ends after the
//!   recorded horizon goes out, the master writes a new horizon: that lease's end plus
//!   [`SLACK_MS`], so that the file is written about once a second under any load, not once a
//!   grant. A write reaches the operating system's page cache, which a crash of the process
//!   (`kill -9`, an abort, the OOM killer) does not lose; a crash of the machine can lose the
//!   writes of the last seconds, as it loses an AOF's under `appendfsync everysec`.
//! - **A save in the foreground** (`SAVE`, a shutdown's, `FLUSHALL`'s) marks the record clean:
//!   the file it wrote holds every grant, so nothing is missing at the next start.
//! - **At start**, a record that is not clean and reaches past the clock means the server may
//!   have counted grants its data lacks: no new holding begins until the horizon
//!   ([`Horizon::wait_until`]) — unless the data loaded is an AOF, which a crashed process
//!   wrote before every reply it sent, so it lacks nothing.

/// How far past a lease's end the recorded horizon reaches, in ms: every grant whose lease ends
/// within it needs no write.
pub const SLACK_MS: u64 = 1_000;

/// The record: the latest lease end a master granted or renewed, and whether its data was
/// saved since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Horizon {
    /// No lease granted before it ends later than this (unix ms, with [`SLACK_MS`]).
    pub until_ms: u64,
    /// The server saved its data in the foreground since the last grant.
    pub clean: bool,
}

/// How the data a server started with was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// From an AOF: it holds every write whose reply went out before a crash of the process.
    Aof,
    /// From an RDB file, which may be older than the last grants.
    Rdb,
    /// Nothing was loaded (no file, no persistence).
    Nothing,
}

impl Horizon {
    /// Takes in a lease that ends at `lease_end_ms`: the record to write, when it must be
    /// written (the lease ends past the recorded horizon, or the record was clean).
    #[must_use]
    pub fn note(&self, lease_end_ms: u64) -> Option<Self> {
        (lease_end_ms > self.until_ms || self.clean)
            .then(|| self.reaching(lease_end_ms.saturating_add(SLACK_MS)))
    }

    /// The record once no holding may begin before `until_ms` (unix ms) for its sake: a
    /// replica promoted while its master waited takes that master's wait.
    #[must_use]
    pub fn reaching(&self, until_ms: u64) -> Self {
        Self {
            until_ms: self.until_ms.max(until_ms),
            clean: false,
        }
    }

    /// What a lease must end after to be written ([`Horizon::note`]): the horizon, or 0 while
    /// the record is clean (the first write after a clean start is recorded).
    #[must_use]
    pub const fn written_after_ms(&self) -> u64 {
        if self.clean { 0 } else { self.until_ms }
    }

    /// Until when a server that started with this record and `loaded` data grants nothing, at
    /// `now_ms`: `None` when its data lacks nothing (a save since, an AOF) or every lease
    /// it may have granted has ended.
    #[must_use]
    pub fn wait_until(&self, loaded: Loaded, now_ms: u64) -> Option<u64> {
        let complete = self.clean || loaded == Loaded::Aof;
        (!complete && now_ms < self.until_ms).then_some(self.until_ms)
    }

    /// The record's bytes: `<until-ms> <clean 0|1>\n`, in a fixed width so that a rewrite in
    /// place replaces the whole.
    #[must_use]
    pub fn encode(&self) -> String {
        format!("{:020} {}\n", self.until_ms, u8::from(self.clean))
    }

    /// Reads a record; `None` for anything [`Horizon::encode`] never writes.
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (until, clean) = text.strip_suffix('\n')?.split_once(' ')?;
        if until.len() != 20 {
            return None;
        }
        Some(Self {
            until_ms: until.parse().ok()?,
            clean: match clean {
                "0" => false,
                "1" => true,
                _ => return None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn a_lease_past_the_horizon_is_written_with_slack() {
        let start = Horizon::default();
        let first = start.note(NOW + 30_000).expect("written");
        assert_eq!(first.until_ms, NOW + 30_000 + SLACK_MS);
        assert_eq!(first.note(NOW + 30_500), None, "within the slack");
        assert_eq!(
            first.note(NOW + 32_000).map(|next| next.until_ms),
            Some(NOW + 33_000)
        );
        let clean = Horizon {
            until_ms: NOW + 60_000,
            clean: true,
        };
        assert_eq!(
            clean.note(NOW + 1_000),
            Some(Horizon {
                until_ms: NOW + 60_000,
                clean: false
            }),
            "a grant after a clean start unmarks it"
        );
    }

    #[test]
    fn a_start_waits_only_when_its_data_may_lack_a_lease_still_running() {
        let record = Horizon {
            until_ms: NOW + 40_000,
            clean: false,
        };
        assert_eq!(record.wait_until(Loaded::Nothing, NOW), Some(NOW + 40_000));
        assert_eq!(record.wait_until(Loaded::Rdb, NOW), Some(NOW + 40_000));
        assert_eq!(record.wait_until(Loaded::Aof, NOW), None);
        assert_eq!(record.wait_until(Loaded::Rdb, NOW + 40_000), None);
        let clean = Horizon {
            clean: true,
            ..record
        };
        assert_eq!(clean.wait_until(Loaded::Rdb, NOW), None);
        assert_eq!(Horizon::default().wait_until(Loaded::Nothing, NOW), None);
    }

    #[test]
    fn the_record_reads_back_and_nothing_else_does() {
        for record in [
            Horizon::default(),
            Horizon {
                until_ms: NOW,
                clean: true,
            },
            Horizon {
                until_ms: u64::MAX,
                clean: false,
            },
        ] {
            assert_eq!(Horizon::decode(record.encode().as_bytes()), Some(record));
            assert_eq!(record.encode().len(), 23);
        }
        for bad in [
            &b""[..],
            b"1 0\n",
            b"00000000000000000001 2\n",
            b"00000000000000000001 0",
            b"0000000000000000000x 0\n",
            b"\xff",
        ] {
            assert_eq!(Horizon::decode(bad), None);
        }
    }
}
