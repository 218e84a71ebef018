//! What this server keeps for its next start, in a small JSON file beside its RDB file
//! (`<dbfilename without its extension>.leasehold` in the server's `dir`, where Redis runs):
//!
//! - that it belongs to a replication group: a master killed and back at once — before any
//!   replica or Sentinel reached it — never counts a write alone, though with Redis's default
//!   persistence (diskless replication, snapshots an hour apart) nothing else on disk says so;
//! - the failover time it learned ([`leasehold_core::deployment`]), which stands in until the
//!   Sentinels have been asked again, and that Sentinels watch it (so `FAILOVER` is refused
//!   from its start, before they reconnect);
//! - the members of its in-sync set, as a master — every replica that may hold a lease it
//!   gave, until it drops them: back at once, it waits for them before a write counts, as a
//!   promoted replica waits for the set it inherits — one that has not re-attached may still
//!   hold its lease, and be promoted.
//!
//! A server that never had a replica, a master or a Sentinel writes nothing, so a lone
//! development server counts at once. The file is written only when what it says changes
//! (rarely: once grouped, when a Sentinel's setting changes, and when the set's members
//! change), whole, to a temporary file
//! that is synced to disk and renamed over the old one, so a crash leaves the old file or the
//! new one. A file that cannot be read or parsed is logged and ignored.

use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;

use leasehold_core::deployment::{Failover, Source};
use redis_module::Context;
use serde::{Deserialize, Serialize};

use crate::server_config;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// This server belongs to a replication group.
    #[serde(default)]
    pub grouped: bool,
    /// The failover time learned, in ms.
    #[serde(default)]
    pub failover_ms: Option<u64>,
    /// Where it was learned, as [`Source::describe`] said.
    #[serde(default)]
    pub failover_source: Option<String>,
    /// Sentinels watch this server: it refuses `FAILOVER` from its start, before they
    /// reconnect.
    #[serde(default)]
    pub sentinels: bool,
    /// The members (`ip:port`) of this server's in-sync set while a master, sorted; empty on
    /// a replica.
    #[serde(default)]
    pub members: Vec<String>,
}

impl Kept {
    /// The failover time kept, if any.
    #[must_use]
    pub fn failover(&self) -> Option<Failover> {
        Some(Failover {
            ms: self.failover_ms?,
            source: Source::Kept(self.failover_source.clone().unwrap_or_default()),
        })
    }
}

/// The file's path, relative to the server's `dir` (Redis runs there).
fn path(ctx: &Context) -> PathBuf {
    path_of(ctx, "leasehold")
}

/// The path of a file of the module's beside the RDB file: `<dbfilename without its
/// extension>.<extension>`, relative to the server's `dir` (Redis runs there).
pub fn path_of(ctx: &Context, extension: &str) -> PathBuf {
    let rdb = server_config::get(ctx, "dbfilename").unwrap_or_else(|| "dump.rdb".to_owned());
    PathBuf::from(rdb).with_extension(extension)
}

/// Reads the file; nothing kept when there is none, or (logged) when it cannot be read.
pub fn load(ctx: &Context) -> Kept {
    let path = path(ctx);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|error| {
            ctx.log_warning(&format!(
                "lock: {} is not what this module writes ({error}); ignored",
                path.display()
            ));
            Kept::default()
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Kept::default(),
        Err(error) => {
            ctx.log_warning(&format!("lock: cannot read {}: {error}", path.display()));
            Kept::default()
        }
    }
}

/// Writes `kept` (logged when it cannot be written: the server then forgets it at a restart).
pub fn save(ctx: &Context, kept: &Kept) {
    let path = path(ctx);
    if let Err(error) = write(&path, kept) {
        ctx.log_warning(&format!(
            "lock: cannot write {}: {error} (a restart will not know this server belongs to a \
             replication group)",
            path.display()
        ));
    }
}

fn write(path: &PathBuf, kept: &Kept) -> std::io::Result<()> {
    let temporary = path.with_extension("leasehold.tmp");
    let json = serde_json::to_vec(kept).map_err(std::io::Error::other)?;
    let mut file = File::create(&temporary)?;
    file.write_all(&json)?;
    file.sync_all()?;
    fs::rename(&temporary, path)?;
    // The rename itself, on disk: the directory Redis runs in.
    File::open(".")?.sync_all()
}
