//! What many clients were granted, recorded as it happened, and the checks over it: no token
//! at or below one acknowledged before it was requested — per server, and across the masters
//! Sentinel designated (Jepsen's method: record a history, then check it); and the fenced
//! resource the clients write to.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use redis::Connection;

use super::Server;

/// One grant of a lock, as the client saw it.
#[derive(Debug, Clone, Default)]
pub struct Grant {
    pub lock: String,
    pub token: i64,
    /// The port of the server that granted it.
    pub server: u16,
    /// When the client sent `LOCK.ACQUIRE` and when the reply arrived, in µs since the start.
    pub requested_us: u64,
    pub acknowledged_us: u64,
    /// Whether it was an exclusive holding, and until when the client counted on it (when it
    /// sent its release, or the end of its lease), in µs since the start.
    pub exclusive: bool,
    pub held_until_us: u64,
    /// Whether a renewal of the lease counted for the holder (synced as the grant was).
    pub renewed: bool,
}

/// The grants of a run, from many threads.
pub struct History {
    epoch: Instant,
    grants: Mutex<Vec<Grant>>,
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            grants: Mutex::new(Vec::new()),
        }
    }

    /// µs since the history began.
    pub fn now_us(&self) -> u64 {
        self.at_us(Instant::now())
    }

    /// `instant` in µs since the history began (0 before it).
    pub fn at_us(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.epoch);
        u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
    }

    pub fn record(&self, grant: Grant) {
        self.grants.lock().expect("history").push(grant);
    }

    pub fn grants(&self) -> Vec<Grant> {
        self.grants.lock().expect("history").clone()
    }
}

/// The grants among `grants` whose token is not above every grant acknowledged before they
/// were requested, each with the largest such earlier token.
pub fn regressions<'a>(grants: &[&'a Grant]) -> Vec<(&'a Grant, i64)> {
    let mut by_ack: Vec<&Grant> = grants.to_vec();
    by_ack.sort_by_key(|grant| grant.acknowledged_us);
    let mut by_request: Vec<&Grant> = grants.to_vec();
    by_request.sort_by_key(|grant| grant.requested_us);
    let (mut acked, mut highest) = (0, i64::MIN);
    let mut found = Vec::new();
    for grant in by_request {
        while acked < by_ack.len() && by_ack[acked].acknowledged_us < grant.requested_us {
            highest = highest.max(by_ack[acked].token);
            acked += 1;
        }
        if grant.token <= highest {
            found.push((grant, highest));
        }
    }
    found
}

/// `grants` in groups of equal `key`.
fn grouped<'a, K: Eq + Hash>(
    grants: impl IntoIterator<Item = &'a Grant>,
    key: impl Fn(&Grant) -> K,
) -> HashMap<K, Vec<&'a Grant>> {
    let mut groups: HashMap<K, Vec<&Grant>> = HashMap::new();
    for grant in grants {
        groups.entry(key(grant)).or_default().push(grant);
    }
    groups
}

/// Regressions within each server's own grants, across its restarts.
pub fn regressions_per_server(grants: &[Grant]) -> Vec<(&Grant, i64)> {
    grouped(grants, |grant| grant.server)
        .values()
        .flat_map(|grants| regressions(grants))
        .collect()
}

/// Regressions within each lock's grants (tokens are comparable per lock).
pub fn regressions_per_lock<'a>(
    grants: impl IntoIterator<Item = &'a Grant>,
) -> Vec<(&'a Grant, i64)> {
    grouped(grants, |grant| grant.lock.clone())
        .values()
        .flat_map(|grants| regressions(grants))
        .collect()
}

/// Pairs of exclusive grants of the same lock whose holdings overlapped in time: two clients
/// that both believed they held it. Expected across an asynchronous failover; the fencing
/// token orders them.
pub fn double_grants(grants: &[Grant]) -> usize {
    double_grant_pairs(grants).len()
}

/// The double grants as (the earlier holding, the grant that overlapped it).
pub fn double_grant_pairs(grants: &[Grant]) -> Vec<(&Grant, &Grant)> {
    let exclusive = grants.iter().filter(|grant| grant.exclusive);
    let mut pairs = Vec::new();
    for grants in grouped(exclusive, |grant| grant.lock.clone()).values_mut() {
        grants.sort_by_key(|grant| grant.acknowledged_us);
        let mut holding: Option<&Grant> = None;
        for grant in grants.iter() {
            if let Some(earlier) = holding
                && grant.acknowledged_us < earlier.held_until_us
            {
                pairs.push((earlier, *grant));
            }
            if holding.is_none_or(|earlier| grant.held_until_us > earlier.held_until_us) {
                holding = Some(grant);
            }
        }
    }
    pairs
}

/// Which server was the designated master at `at_us`: `first` until the first switch, then
/// the one each `(time, port)` switch named.
pub fn designated(first: u16, switches: &[(u64, u16)], at_us: u64) -> u16 {
    switches
        .iter()
        .take_while(|(time, _)| *time <= at_us)
        .last()
        .map_or(first, |(_, port)| *port)
}

/// The grants made by the designated master, at both their request and their reply (a grant
/// by an old master that Sentinel already replaced is a split-brain grant, not one of these).
pub fn by_designated_masters<'a>(
    grants: &'a [Grant],
    first: u16,
    switches: &[(u64, u16)],
) -> Vec<&'a Grant> {
    grants
        .iter()
        .filter(|grant| {
            designated(first, switches, grant.requested_us) == grant.server
                && designated(first, switches, grant.acknowledged_us) == grant.server
        })
        .collect()
}

/// A fenced resource in Redis: a server of its own with the module (started at the first
/// write), where each write to a lock's resource is `LOCK.FENCED fence:<lock> token RPUSH
/// written:<lock> token`, accepted only with a token at least the largest that wrote through the
/// lock's fence. The lists are the resource's history, replayed at the end.
#[derive(Default)]
pub struct FencedStore {
    store: OnceLock<(Server, Mutex<Connection>)>,
    locks: Mutex<HashSet<String>>,
    rejected: AtomicU64,
}

impl FencedStore {
    /// Writes `token` to `lock`'s resource through its fence; true if accepted (`STALE`
    /// otherwise).
    pub fn write(&self, lock: &str, token: i64) -> bool {
        let (_, con) = self.store.get_or_init(|| {
            let server = Server::start(&[]);
            let con = Mutex::new(server.client());
            (server, con)
        });
        self.locks.lock().expect("locks").insert(lock.to_owned());
        let written = redis::cmd("LOCK.FENCED")
            .arg(format!("fence:{lock}"))
            .arg(token)
            .arg("RPUSH")
            .arg(format!("written:{lock}"))
            .arg(token)
            .query::<i64>(&mut *con.lock().expect("store"));
        match written {
            Ok(_) => true,
            Err(error) if error.code() == Some("STALE") => {
                self.rejected.fetch_add(1, Ordering::SeqCst);
                false
            }
            Err(error) => panic!("the fenced store refused a write: {error}"),
        }
    }

    /// Writes accepted, writes rejected, and whether every resource's history (its list)
    /// never has a token below one accepted before it.
    pub fn summary(&self) -> (usize, u64, bool) {
        let Some((_, con)) = self.store.get() else {
            return (0, self.rejected.load(Ordering::SeqCst), true);
        };
        let mut con = con.lock().expect("store");
        let (mut count, mut increasing) = (0, true);
        for lock in self.locks.lock().expect("locks").iter() {
            let history: Vec<i64> = redis::cmd("LRANGE")
                .arg(format!("written:{lock}"))
                .arg(0)
                .arg(-1)
                .query(&mut *con)
                .expect("the resource's history");
            count += history.len();
            increasing &= history.windows(2).all(|pair| pair[0] <= pair[1]);
        }
        (count, self.rejected.load(Ordering::SeqCst), increasing)
    }
}
