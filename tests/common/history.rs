//! What many clients were granted, recorded as it happened, and the checks over it: no token
//! at or below one acknowledged before it was requested — per server, and across the masters
//! Sentinel designated (Jepsen's method: record a history, then check it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

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
    /// Whether it was an exclusive holding, and until when the client knew it held it (its
    /// release's reply, or the end of its lease), in µs since the start.
    pub exclusive: bool,
    pub held_until_us: u64,
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
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
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

/// Regressions within each server's own grants, across its restarts.
pub fn regressions_per_server(grants: &[Grant]) -> Vec<(&Grant, i64)> {
    let mut by_server: HashMap<u16, Vec<&Grant>> = HashMap::new();
    for grant in grants {
        by_server.entry(grant.server).or_default().push(grant);
    }
    by_server
        .values()
        .flat_map(|grants| regressions(grants))
        .collect()
}

/// Pairs of exclusive grants of the same lock whose holdings overlapped in time: two clients
/// that both believed they held it. Expected across an asynchronous failover; the fencing
/// token orders them.
pub fn double_grants(grants: &[Grant]) -> usize {
    let mut by_lock: HashMap<&str, Vec<&Grant>> = HashMap::new();
    for grant in grants.iter().filter(|grant| grant.exclusive) {
        by_lock.entry(&grant.lock).or_default().push(grant);
    }
    let mut doubles = 0;
    for grants in by_lock.values_mut() {
        grants.sort_by_key(|grant| grant.acknowledged_us);
        let mut held_until = 0;
        for grant in grants.iter() {
            if grant.acknowledged_us < held_until {
                doubles += 1;
            }
            held_until = held_until.max(grant.held_until_us);
        }
    }
    doubles
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
