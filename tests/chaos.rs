//! `make chaos`: fencing tokens under random crashes, pauses, partitions and Sentinel
//! failovers — counted, not assumed (Jepsen's method: record a history, then check it).
//!
//! A master and two replicas with the module (AOF on the master, RDB on one replica, nothing
//! on the other; a server back at once without the grants it made waits out their leases by
//! itself: the lease horizon — except one back with its volume lost, record and all, which comes
//! back with `lock.restart-delay-ms` as the configuration guide asks), three Sentinels, and 21 clients that find the master through Sentinel (the
//! `redis` crate's Sentinel client) and lock through `leasehold-client`, in three classes of
//! seven that differ only in how they sync a grant and a renewal before counting on it: not at
//! all, to any 1 replica, to every member of the master's in-sync set (the client's default,
//! which must never double-grant: the run fails if it does). Each class has
//! locks of its own, so every double grant lies within one class, and the one nemesis hits all
//! three at once. Each client loops: acquire one of its class's locks, or two of them as a set
//! (`LOCK.MACQUIRE`) (a new owner each time; exclusive or shared, with or without waiting; the
//! watchdog on) → an exclusive holder writes its token for each lock to a fenced store — a
//! Redis of its own with the module, where the write is `LOCK.FENCED fence:<lock> token RPUSH
//! written:<lock> token`, refused below the largest token that wrote → sometimes renew
//! once → release. The seventh client of each class holds exclusively for 2 to 3 leases each
//! time while the watchdog renews every third of one, writing each third and stopping as soon
//! as the holding is reported lost. A holder counts on its lease only as far as the last
//! renewal that counted (`Guard::lease_end`). Each class also holds an election
//! (`<class>-election`, through the client's `Election`): two candidates campaign in turn, lead
//! for 1 to 3 leases writing their epoch to the fenced store, and resign — each term a grant of
//! the election's key, checked with the rest — and an observer follows it with `LOCK.OBSERVE
//! ... LAST`, across failovers, failing the run if it is ever told a leader right after another
//! term's leader with no vacancy between. Now and then a client freezes past its lease while
//! holding (as a `SIGSTOP`ped or GC-paused process would; the clients are threads of this
//! test, and the freeze blocks the watchdog too) and writes late. A nemesis, at random
//! moments, each kind once per round in a random order (drawn from the seed alone, each fault
//! with every choice it may make, so that a seed repeats its schedule whatever the group does;
//! the run prints it): `kill -9` of the master (it comes back
//! at once or after the failover, with its own configuration — so as a master — or as a
//! replica), `kill -9` of the master and back within a second, the master killed and back at
//! once with its original configuration (the first master as a master, the others as replicas
//! of it: a container, or a templated configuration Sentinel's `CONFIG REWRITE` did not
//! reach), `SIGSTOP` of the master past the Sentinel down-after time, a cut link (the master's
//! proxy closes, cutting it off from replicas, Sentinels and clients), `SENTINEL FAILOVER`,
//! `FAILOVER` (the command, only to check that the module refuses it under Sentinel, which
//! does not follow it: redis/redis#13118), `CLIENT PAUSE WRITE`, a replica killed for good
//! (replaced 30 to 60 s later by a new, empty server at its address, as an operator or an
//! orchestrator would; meanwhile the run has two nodes), and a replica's link to its master
//! cut for 3 to 25 s while the Sentinels and the clients still reach it; after half of them it
//! waits for the group to settle (one master, every live replica linked), and the other half
//! the next fault overlaps the Sentinels' reconfiguration. A group that did not settle within
//! `down-after-milliseconds` + 44 s gets what a paged person would do: what a server's
//! `INFO lock` names is run (`lock_insync_to_run`, the successor in a replication cycle), and
//! counted as a fault. The in-sync set's timing is learned from the Sentinels
//! (`down-after-milliseconds 1000`, or Sentinel's own defaults with
//! `LEASEHOLD_CHAOS_TIMING=default`), as in production.
//!
//! The checker reports operations, grants, faults by kind, failovers, double grants (expected
//! under asynchronous replication), split-brain grants (by a server Sentinel had already
//! replaced), and the two token regressions that must be 0: a grant by the designated master
//! whose token is not above every grant of the lock acknowledged before it was requested, and
//! a server issuing a token not above one it issued before, across its restarts. Plus the
//! store's rejections and a replay of what it accepted (each list never decreasing). The run
//! fails on a token regression, on a store history that went down,
//! on a double grant in the default class, and on a `FAILOVER` the module let through. It
//! prints what the safe default costs in availability: the default class's grants as a share
//! of the unsynced class's (over the whole run, the time with three nodes, and the designated
//! masters' grants only) with a verdict against 0.5x, the seconds the unsynced class was granted
//! something and the default class nothing, by the fault before them, its refusals by reason,
//! and the seconds in which no master granted anything.
//!
//! Beside the lock clients, a plain `SET` worker finds the master through Sentinel as they do
//! and writes every 15 ms (500 ms timeout; it moves to the master Sentinel names on any error,
//! and when Sentinel, asked every 250 ms, names another): a line tells
//! in how many of the run's seconds (of `LEASEHOLD_CHAOS_SECONDS`, from the nemesis's start)
//! Redis itself took a write on the master Sentinel had designated, how many it did not, by
//! the fault before them, and beside them in how many the default class was granted something.
//! `LEASEHOLD_CHAOS_CONTROL=1` is its control: the same layout, persistence and timing without
//! the module, the same seed's schedule, the plain `SET` worker as the only client, and no
//! check of the module; the `FAILOVER` command is not sent (only the module refuses it), and a
//! group that does not settle gets no person running what `INFO lock` names (there is none).
//! `make chaos` runs it after the run at Sentinel's defaults, with the same seed, and fails if
//! the module's run had more than 10 % more seconds without a master taking writes.
//!
//! `LEASEHOLD_CHAOS_SECONDS` sets the length (default 20, as in `make test`; `make chaos
//! DURATION=600` for ten minutes), `LEASEHOLD_CHAOS_SEED` the seed (default: new each run).
//! `LEASEHOLD_CHAOS_PARTITIONS=1` adds a partition that cuts the master and a replica off from
//! the Sentinels and the other replica (a layout without a Sentinel beside each server), and
//! leaves out the replica killed for good (each side needs a replica), and
//! `LEASEHOLD_CHAOS_STRICT=1` runs every server with `lock.insync-strict yes`, the rule for it:
//! without it, the default class's double grants there are printed but do not fail the run.
//! `LEASEHOLD_CHAOS_TIMING=default` times the Sentinels as Sentinel's own defaults do
//! (`down-after-milliseconds` 30 000, `failover-timeout` 180 000; `5000` for 5 000 ms): a
//! fault waits `down-after-milliseconds` longer for its failover, so a run has fewer of them.
//! A summary line goes to stderr, with the seed, and one line per class: grants, double grants
//! per 10 000 exclusive grants, `NotReplicated` refusals of grants and of renewals, holdings
//! reported lost while held, and the acquire latency.
//!
//! `LEASEHOLD_CHAOS_KILL_CLIENTS=1` (set by `make chaos`, not by `make test`'s 20 s run; `=0`
//! leaves it out) adds a crasher per class: again and again it starts a real holder process
//! (bash with a connection of its own to the master, as in tests/session.rs) that opens a
//! session (`GRACE` 1000 ms), queues with `WAIT` for one of the class's locks, tied to the
//! session, with a lease five times the clients', and syncs the grant as the class's clients do
//! (`SYNC` on the acquire for the default class, `NOSYNC` and `WAIT 1` behind it for synced to
//! 1 replica, `NOSYNC` alone for the unsynced class). Only
//! a grant that counted is recorded, in the class, believed until the `kill -9` that ends the
//! process a short random time later (or its session's deadline, if earlier: the holder learns
//! first), so killed holders take part in the class's double-grant check. A line then tells
//! how many holders were killed, how long their locks took to pass on (from the kill to the
//! next grant by the designated master, p50/p99/max), and how: by the session (within the
//! grace and 200 ms), at the lease's end (a failover or restart lost the session), or otherwise.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Write};
use std::ops::Range;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::history::{self, FencedStore, Grant, History};
use common::sentinel::{Group, MASTER_NAME, Persistence, Timing};
use leasehold_client::redlock::DRIFT_FACTOR;
use leasehold_client::{Client, Election, Error, Lock, ReadWriteLock, Sync};
use rand::{
    RngExt, SeedableRng,
    rngs::StdRng,
    seq::{SliceRandom, index},
};
use redis::{ConnectionAddr, Value};

/// Clients per class of sync that hold briefly.
const CLIENTS_PER_CLASS: usize = 6;
/// Clients per class that hold for several leases while the watchdog renews.
const HOLDERS_PER_CLASS: usize = 1;
/// Locks per class: each class has locks of its own, so a double grant is within one class.
const LOCKS: usize = 4;
const LEASE: Duration = Duration::from_secs(1);
/// How long a waiting acquire waits in the server's queue.
const QUEUE_WAIT: Duration = Duration::from_millis(300);
/// How long after a replica is lost for good a new, empty one takes its place.
const REPLACED_AFTER: Range<u64> = 30_000..60_000;
/// The nemesis's pauses that no fault follows draw from the seed xor this ([`nemesis`]).
const RETRIES: u64 = 0x9e37_79b9_7f4a_7c15;
/// How long past `down-after-milliseconds` a fault waits for the failover it may cause.
const FAILOVER_MARGIN: Duration = Duration::from_secs(14);
/// How long past `down-after-milliseconds` the group may take to settle after a fault before
/// the person on call acts.
const SETTLE_MARGIN: Duration = Duration::from_secs(44);

/// How a class of clients syncs its grants before counting on them (`leasehold-client`'s
/// `Sync`): the same nemesis hits all three at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Returned as soon as the master made it.
    NotSynced,
    /// `WAIT 1`: any one replica.
    OneReplica,
    /// Every member of the master's in-sync set (the client's default): the class that must
    /// never see a double grant.
    InSync,
}

impl Class {
    const ALL: [Class; 3] = [Class::NotSynced, Class::OneReplica, Class::InSync];

    fn name(self) -> &'static str {
        match self {
            Class::NotSynced => "not-synced",
            Class::OneReplica => "synced-to-1",
            Class::InSync => "synced-in-sync-set",
        }
    }

    fn sync(self) -> Sync {
        match self {
            Class::NotSynced => Sync::off(),
            Class::OneReplica => Sync::exactly(1),
            Class::InSync => Sync::to_replicas(),
        }
    }
}

/// What one class's clients saw.
#[derive(Default)]
struct ClassStats {
    refused: AtomicU64,
    /// The grants refused, by the reason `NotReplicated` gave (each number as N).
    reasons: Mutex<BTreeMap<String, u64>>,
    /// Explicit renewals the replicas did not acknowledge (they did not count).
    renewals_refused: AtomicU64,
    /// Long holdings reported lost before their time was up.
    lost: AtomicU64,
    /// µs from sending the acquire to holding the lock, per grant.
    latencies: Mutex<Vec<u64>>,
}

impl ClassStats {
    /// A grant that did not count, for `reason`.
    fn refused(&self, reason: &str) {
        self.refused.fetch_add(1, Ordering::SeqCst);
        // Each number as N, so that one reason is one entry.
        let mut shape = String::new();
        for c in reason.chars() {
            if !c.is_ascii_digit() {
                shape.push(c);
            } else if !shape.ends_with('N') {
                shape.push('N');
            }
        }
        *self
            .reasons
            .lock()
            .expect("reasons")
            .entry(shape)
            .or_default() += 1;
    }

    fn granted(&self, latency_us: u64) {
        self.latencies.lock().expect("latencies").push(latency_us);
    }

    /// The `q`-quantile of the grant latencies, ms.
    fn latency_ms(&self, q: f64) -> f64 {
        quantile_ms(self.latencies.lock().expect("latencies").clone(), q)
    }
}

/// The `q`-quantile of durations in µs, in ms (0 for none).
fn quantile_ms(mut us: Vec<u64>, q: f64) -> f64 {
    us.sort_unstable();
    let at = ((us.len() as f64 - 1.0) * q).round() as usize;
    us.get(at).map_or(0.0, |us| *us as f64 / 1_000.0)
}

#[test]
fn fencing_holds_under_random_crashes_pauses_partitions_and_failovers() {
    let seconds: u64 = std::env::var("LEASEHOLD_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    // A new seed each run unless `LEASEHOLD_CHAOS_SEED` names one; the summary prints it.
    let seed: u64 = std::env::var("LEASEHOLD_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) ^ common::now_ms().unsigned_abs());
    let history = Arc::new(History::new());
    let timing = timing();
    if control() {
        control_run(seconds, seed, &history, timing);
        return;
    }
    // No lock.restart-delay-ms: a master back at once without the grants it last acknowledged
    // — empty, or from an older RDB — waits out their leases by itself (the lease horizon), so
    // that it grants none of them again while their holders still count on them. One whose
    // volume was lost has no record left: it comes back with the delay (`Group::restart`), as
    // docs/operations/configuration.md asks of a server that can lose its volume (a run on
    // 95e009b without it: a default-class double grant 0.6 s after such a restart).
    let module_args: &[&str] = if strict() {
        &["insync-strict", "yes"]
    } else {
        &[]
    };
    let mut group = Group::with(&history, module_args, timing);
    let first_master = group.addresses[0];
    let run = Arc::new(Run::default());
    let clients: Vec<_> = (0..(CLIENTS_PER_CLASS + HOLDERS_PER_CLASS) * Class::ALL.len())
        .map(|id| {
            let class = Class::ALL[id % Class::ALL.len()];
            let long = id >= CLIENTS_PER_CLASS * Class::ALL.len();
            let (urls, history, run) = (
                group.sentinel_urls(),
                Arc::clone(&history),
                Arc::clone(&run),
            );
            let kind = (class, long);
            thread::spawn(move || client(seed ^ id as u64, kind, &urls, &history, &run))
        })
        .collect();
    let mut electors = Vec::new();
    for (class, id) in Class::ALL.into_iter().zip((2_000..).step_by(10)) {
        for n in 0..CANDIDATES_PER_CLASS {
            let (urls, history, run) = (
                group.sentinel_urls(),
                Arc::clone(&history),
                Arc::clone(&run),
            );
            let seed = seed ^ (id + n);
            electors.push(thread::spawn(move || {
                candidate(seed, class, &urls, &history, &run);
            }));
        }
        let (urls, run) = (group.sentinel_urls(), Arc::clone(&run));
        electors.push(thread::spawn(move || observer(class, &urls, &run)));
    }
    let crashers: Vec<_> = if kill_clients() {
        Class::ALL
            .into_iter()
            .zip(1_000..)
            .map(|(class, id)| {
                let (urls, history, run) = (
                    group.sentinel_urls(),
                    Arc::clone(&history),
                    Arc::clone(&run),
                );
                thread::spawn(move || crasher(seed ^ id, class, &urls, &history, &run))
            })
            .collect()
    } else {
        Vec::new()
    };

    let writer = spawn_plain_writer(&group, &history, &run);
    let length = Duration::from_secs(seconds);
    let started_us = history.now_us();
    let mut faults = nemesis(&mut group, &history, &run, (length, timing), seed);
    run.stop.store(true, Ordering::SeqCst);
    writer.join().expect("plain SET worker");
    for client in clients {
        client.join().expect("client thread");
    }
    for crasher in crashers {
        crasher.join().expect("crasher thread");
    }
    for elector in electors {
        elector.join().expect("election thread");
    }
    *faults.entry("client stalled past its lease").or_default() +=
        run.stalls.load(Ordering::SeqCst);

    let grants = history.grants();
    let switches = group.switches();
    let designated = history::by_designated_masters(&grants, first_master, &switches);
    let regressed = history::regressions_per_lock(designated.iter().copied());
    for (grant, highest) in regressed.iter().take(10) {
        // None is expected: each is told in full, to find its cause.
        let earlier: Vec<&Grant> = designated
            .iter()
            .filter(|earlier| earlier.lock == grant.lock && earlier.token == *highest)
            .copied()
            .collect();
        eprintln!(
            "chaos token regression: {grant:?} (master then {}) after {earlier:?}; switches \
             {switches:?}; faults {:?}",
            history::designated(first_master, &switches, grant.requested_us),
            run.faults.lock().expect("faults"),
        );
    }
    let across = regressed.len();
    let own = history::regressions_per_server(&grants).len();
    let split_brain = grants.len() - designated.len();
    let doubles = history::double_grants(&grants);
    let (accepted, rejected, replay) = run.store.summary();
    let mut in_sync_doubles = 0;
    for class in Class::ALL {
        let granted: Vec<Grant> = grants
            .iter()
            .filter(|grant| grant.lock.starts_with(class.name()))
            .cloned()
            .collect();
        let exclusive = granted.iter().filter(|grant| grant.exclusive).count();
        let pairs = history::double_grant_pairs(&granted);
        let doubles = pairs.len();
        if class == Class::InSync {
            in_sync_doubles = doubles;
        }
        let causes = causes(&pairs, &run.faults.lock().expect("faults"));
        if class != Class::NotSynced {
            for (earlier, later) in &pairs {
                // Rare where grants are synced: each is told in full, to find its cause.
                let master = |at| history::designated(first_master, &switches, at);
                eprintln!(
                    "chaos {} double grant: {earlier:?} (master then {}) and {later:?} (master \
                     then {}); faults {:?}; switches {switches:?}",
                    class.name(),
                    master(earlier.requested_us),
                    master(later.requested_us),
                    run.faults.lock().expect("faults"),
                );
            }
        }
        let stats = run.stats(class);
        let refused = stats.refused.load(Ordering::SeqCst);
        let renewals_refused = stats.renewals_refused.load(Ordering::SeqCst);
        let lost = stats.lost.load(Ordering::SeqCst);
        eprintln!(
            "chaos class {}: {} grants ({exclusive} exclusive), {doubles} double grants \
             ({:.1} per 10 000 exclusive grants; by the fault before them and whether the \
             earlier holder renewed: {causes:?}), {refused} NotReplicated refusals ({:.2} % of \
             grants and refusals), {renewals_refused} renewals not replicated, {lost} long \
             holdings lost, acquire latency p50 {:.2} ms p99 {:.2} ms",
            class.name(),
            granted.len(),
            doubles as f64 * 10_000.0 / exclusive.max(1) as f64,
            refused as f64 * 100.0 / (granted.len() as f64 + refused as f64).max(1.0),
            stats.latency_ms(0.5),
            stats.latency_ms(0.99),
        );
    }
    eprintln!(
        "chaos: {seconds} s (seed {seed}, down-after-milliseconds {}), {} operations, {} grants \
         ({} by designated masters; {} sets of two locks, a grant per lock), faults {faults:?}, \
         {} failovers, {doubles} double grants, {split_brain} split-brain grants, \
         {across} token regressions at designated masters, {own} on a server's own tokens, \
         {accepted} fenced writes accepted (LOCK.FENCED on a store server), {rejected} stale \
         writes rejected, replay {}",
        timing.down_after_ms,
        run.operations.load(Ordering::SeqCst),
        grants.len(),
        designated.len(),
        run.sets.load(Ordering::SeqCst),
        switches.len(),
        if replay {
            "never decreasing"
        } else {
            "OUT OF ORDER"
        },
    );
    eprintln!("{}", schedule_line(seed, &run));
    let out_of_order = run.out_of_order.load(Ordering::SeqCst);
    eprintln!(
        "chaos elections: {} terms (in the grants above, a key per class), {} states told to \
         observers, {out_of_order} out of order (a leader after another term's, no vacancy \
         between)",
        run.terms.load(Ordering::SeqCst),
        run.observed.load(Ordering::SeqCst),
    );
    availability(&grants, &designated, history.now_us(), &run);
    let (line, written) = writable(
        &run,
        (started_us, length),
        (first_master, &switches),
        Some(&designated),
    );
    eprintln!("{line}");
    if kill_clients() {
        eprintln!(
            "{}",
            killed_holders(
                &run.kills.lock().expect("kills"),
                &designated,
                run.holder_processes.load(Ordering::SeqCst)
            )
        );
    }
    assert_eq!((across, own), (0, 0), "token regressions");
    assert_eq!(
        run.failovers_let_through.load(Ordering::SeqCst),
        0,
        "FAILOVER under Sentinel must be refused"
    );
    // Outside the default rule's stated assumption (a Sentinel beside each server), double
    // grants are counted and printed, not failed on: lock.insync-strict is the rule there.
    if strict() || !partitions() {
        assert_eq!(
            in_sync_doubles, 0,
            "double grants among grants synced to the in-sync set (the default)"
        );
    }
    assert!(
        replay,
        "the fenced store's history accepted a token below an earlier one"
    );
    assert_eq!(
        out_of_order, 0,
        "an observer missed a vacancy between two terms"
    );
    assert!(designated.len() >= 100, "only {} grants", designated.len());
    assert!(written > 0, "the plain SET worker never wrote to a master");
}

/// `LEASEHOLD_CHAOS_CONTROL`: the run's control. The same layout (a master and two replicas,
/// with the same persistence, behind their proxies; three Sentinels with the same timing),
/// started without the module, under the same seed's faults ([`Schedule`]), with the plain
/// `SET` worker as its only client: no lock clients, electors, crashers or observers, and no
/// check of the module. What only the module gives the nemesis is left out: the `FAILOVER`
/// command is not sent (the module refuses it under Sentinel; plain Redis would carry it out,
/// which Sentinel does not follow: redis/redis#13118), and when the group does not settle,
/// the person paged has no `INFO lock` naming what to run, and does nothing. Prints the
/// faults, the schedule, and the seconds with a master taking plain `SET`.
fn control_run(seconds: u64, seed: u64, history: &Arc<History>, timing: Timing) {
    let mut group = Group::without_module(history, timing);
    let first_master = group.addresses[0];
    let run = Arc::new(Run {
        control: true,
        ..Run::default()
    });
    let writer = spawn_plain_writer(&group, history, &run);
    let length = Duration::from_secs(seconds);
    let started_us = history.now_us();
    let faults = nemesis(&mut group, history, &run, (length, timing), seed);
    run.stop.store(true, Ordering::SeqCst);
    writer.join().expect("plain SET worker");
    let switches = group.switches();
    eprintln!(
        "chaos control: {seconds} s (seed {seed}, down-after-milliseconds {}), Redis and \
         Sentinel without the module, the plain SET worker alone, faults {faults:?}, {} \
         failovers",
        timing.down_after_ms,
        switches.len(),
    );
    eprintln!("{}", schedule_line(seed, &run));
    let (line, written) = writable(&run, (started_us, length), (first_master, &switches), None);
    eprintln!("{line}");
    assert!(written > 0, "the plain SET worker never wrote to a master");
}

/// The default class's grants over the unsynced class's among `grants`.
fn share<'a>(grants: impl IntoIterator<Item = &'a Grant>) -> f64 {
    let (mut in_sync, mut unsynced) = (0_u64, 0_u64);
    for grant in grants {
        if grant.lock.starts_with(Class::InSync.name()) {
            in_sync += 1;
        } else if grant.lock.starts_with(Class::NotSynced.name()) {
            unsynced += 1;
        }
    }
    in_sync as f64 / unsynced.max(1) as f64
}

/// The kind of the fault that began last at or before `second` (of the run's clock), or "none".
fn fault_before(faults: &[(u64, &'static str)], second: u64) -> &'static str {
    fault_before_us(faults, second * 1_000_000)
}

/// The kind of the fault that began last at or before `at_us` (on the run's clock), or "none".
fn fault_before_us(faults: &[(u64, &'static str)], at_us: u64) -> &'static str {
    faults
        .iter()
        .take_while(|(began, _)| *began <= at_us)
        .last()
        .map_or("none", |(_, kind)| *kind)
}

/// Redis's own availability, in one line: the seconds of the nemesis's `length` from
/// `started_us` (whole seconds from there, on the history's clock) in which a plain `SET`
/// succeeded on the server Sentinel had designated master (`first` until the first of
/// `switches`), and those without, by the fault before them; with the module, beside them the
/// seconds in which the default class was granted something by a designated master (of
/// `designated`: when its grant was acknowledged). Also returns the seconds with a `SET`.
fn writable(
    run: &Run,
    (started_us, length): (u64, Duration),
    (first, switches): (u16, &[(u64, u16)]),
    designated: Option<&[&Grant]>,
) -> (String, usize) {
    let seconds = length.as_secs();
    let second_of = |at_us: u64| {
        at_us
            .checked_sub(started_us)
            .map(|us| us / 1_000_000)
            .filter(|second| *second < seconds)
    };
    let written: BTreeSet<u64> = run
        .plain_writes
        .lock()
        .expect("plain writes")
        .iter()
        .filter(|(at_us, server)| history::designated(first, switches, *at_us) == *server)
        .filter_map(|(at_us, _)| second_of(*at_us))
        .collect();
    let faults = run.faults.lock().expect("faults");
    let mut without: BTreeMap<&str, u64> = BTreeMap::new();
    for second in (0..seconds).filter(|second| !written.contains(second)) {
        *without
            .entry(fault_before_us(&faults, started_us + second * 1_000_000))
            .or_default() += 1;
    }
    let mut line = format!(
        "chaos writable: {} s of {seconds} s with a master taking plain SET ({} s without; by \
         the fault before them: {without:?})",
        written.len(),
        seconds - written.len() as u64,
    );
    match designated {
        Some(designated) => {
            let granted: BTreeSet<u64> = designated
                .iter()
                .filter(|grant| grant.lock.starts_with(Class::InSync.name()))
                .filter_map(|grant| second_of(grant.acknowledged_us))
                .collect();
            line += &format!(
                "; beside them, the default class (synced to the in-sync set) was granted \
                 something in {} s ({} of the {} with a master taking plain SET)",
                granted.len(),
                granted.intersection(&written).count(),
                written.len(),
            );
        }
        None => line += "; the control: Redis and Sentinel without the module",
    }
    (line, written.len())
}

/// What the safe default cost in availability, printed: the default class's grants as a share
/// of the unsynced class's (the whole run; the time with three nodes, with a verdict against
/// 0.5x; the designated masters' grants only), second by second when both were granted, the
/// seconds the unsynced class was granted something and the default class nothing (by the
/// fault before them), the default class's refusals by reason, and the seconds in which no
/// master granted anything (the unsynced class got nothing) until `end_us`.
fn availability(grants: &[Grant], designated: &[&Grant], end_us: u64, run: &Run) {
    let lost = run.lost_periods.lock().expect("lost periods");
    let three_nodes = share(grants.iter().filter(|g| !lost.contains(g.requested_us)));
    let first_us = grants.iter().map(|g| g.requested_us).min().unwrap_or(0);
    let three_node_s = (first_us / 1_000_000..end_us.div_ceil(1_000_000))
        .filter(|second| !lost.contains(second * 1_000_000))
        .count();
    eprintln!(
        "chaos: the default class (synced to the in-sync set) was granted {:.2}x the grants of \
         the unsynced class: {three_nodes:.2}x in the {three_node_s} s with three nodes \
         ({}), {:.2}x counting the designated masters' grants only",
        share(grants),
        if three_nodes >= 0.5 {
            "at least 0.5x"
        } else {
            "BELOW 0.5x"
        },
        share(designated.iter().copied()),
    );
    // Second by second: whether each class was granted anything, and how much.
    let mut per_second: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for grant in grants {
        let second = per_second
            .entry(grant.requested_us / 1_000_000)
            .or_default();
        if grant.lock.starts_with(Class::InSync.name()) {
            second.0 += 1;
        } else if grant.lock.starts_with(Class::NotSynced.name()) {
            second.1 += 1;
        }
    }
    let granting = per_second
        .values()
        .filter(|(_, unsynced)| *unsynced > 0)
        .count();
    let both: Vec<(u64, u64)> = per_second
        .values()
        .copied()
        .filter(|(in_sync, unsynced)| *in_sync > 0 && *unsynced > 0)
        .collect();
    let (in_sync_there, unsynced_there) = both.iter().fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
    let faults = run.faults.lock().expect("faults");
    let mut without: BTreeMap<&str, u64> = BTreeMap::new();
    for (second, _) in per_second
        .iter()
        .filter(|(_, (in_sync, unsynced))| *in_sync == 0 && *unsynced > 0)
    {
        *without.entry(fault_before(&faults, *second)).or_default() += 1;
    }
    let first = per_second.keys().next().copied().unwrap_or(0);
    let seconds = end_us.div_ceil(1_000_000).saturating_sub(first);
    let mut idle: BTreeMap<&str, u64> = BTreeMap::new();
    for second in (first..first + seconds).filter(|second| {
        per_second
            .get(second)
            .is_none_or(|(_, unsynced)| *unsynced == 0)
    }) {
        *idle.entry(fault_before(&faults, second)).or_default() += 1;
    }
    let reasons = run
        .stats(Class::InSync)
        .reasons
        .lock()
        .expect("reasons")
        .clone();
    eprintln!(
        "chaos: the default class was granted something in {} of the {granting} seconds the \
         unsynced class was ({:.0} %), and in those seconds {:.2}x the unsynced class's grants; \
         seconds without a synced grant, by the fault before them: {without:?}; its refusals by \
         reason: {reasons:?}; {} of {seconds} s with no master granting (the unsynced class got \
         nothing), by the fault before them: {idle:?}",
        both.len(),
        both.len() as f64 * 100.0 / granting.max(1) as f64,
        in_sync_there as f64 / unsynced_there.max(1) as f64,
        seconds.saturating_sub(granting as u64),
    );
}

/// `LEASEHOLD_CHAOS_PARTITIONS`: the nemesis also cuts the master and a replica off from the
/// Sentinels ([`Fault::SentinelsCutOff`]), which the default in-sync rule does not cover.
fn partitions() -> bool {
    std::env::var_os("LEASEHOLD_CHAOS_PARTITIONS").is_some()
}

/// `LEASEHOLD_CHAOS_TIMING`: the Sentinels' timing — `default` for Sentinel's own
/// (`down-after-milliseconds` 30 000, `failover-timeout` 180 000), `5000` for 5 000 ms, and
/// otherwise 1 000 ms.
fn timing() -> Timing {
    match std::env::var("LEASEHOLD_CHAOS_TIMING").as_deref() {
        Ok("default") => Timing::DEFAULT,
        Ok("5000") => Timing::FIVE_SECONDS,
        _ => Timing::FAST,
    }
}

/// `LEASEHOLD_CHAOS_CONTROL` (but not `=0`): the run's control, without the module
/// ([`control_run`]).
fn control() -> bool {
    std::env::var("LEASEHOLD_CHAOS_CONTROL").is_ok_and(|value| !value.is_empty() && value != "0")
}

/// `LEASEHOLD_CHAOS_STRICT`: every server runs with `lock.insync-strict yes`.
fn strict() -> bool {
    std::env::var_os("LEASEHOLD_CHAOS_STRICT").is_some()
}

/// `LEASEHOLD_CHAOS_KILL_CLIENTS` (but not `=0`): a crasher per class kills holder processes
/// ([`crasher`]).
fn kill_clients() -> bool {
    std::env::var("LEASEHOLD_CHAOS_KILL_CLIENTS")
        .is_ok_and(|value| !value.is_empty() && value != "0")
}

/// What the clients share.
#[derive(Default)]
struct Run {
    /// The control, without the module ([`control_run`]).
    control: bool,
    stop: AtomicBool,
    operations: AtomicU64,
    classes: [ClassStats; 3],
    stalls: AtomicU64,
    /// Sets of two locks granted (each lock of a set is also counted as a grant).
    sets: AtomicU64,
    store: FencedStore,
    /// When each fault began (µs on the history's clock), and its kind.
    faults: Mutex<Vec<(u64, &'static str)>>,
    /// Holder processes the crashers started, and those killed while holding.
    holder_processes: AtomicU64,
    kills: Mutex<Vec<Kill>>,
    /// When the plain `SET` worker's writes succeeded (µs on the history's clock, at the
    /// reply), and on which server ([`plain_writer`]).
    plain_writes: Mutex<Vec<(u64, u16)>>,
    /// The nemesis's faults in order, each as the pause before it and its kind
    /// ([`schedule_line`]).
    schedule: Mutex<Vec<String>>,
    /// `FAILOVER` commands the module did not refuse (it must refuse every one).
    failovers_let_through: AtomicU64,
    /// When a replica was lost for good, until a new one took its place.
    lost_periods: Mutex<Periods>,
    /// Elections' terms led (each also recorded as a grant of the class's election key).
    terms: AtomicU64,
    /// States the elections' observers were told, and how many came out of order: a leader
    /// right after another term's leader, with no vacancy between.
    observed: AtomicU64,
    out_of_order: AtomicU64,
}

/// Stretches of the run (µs on the history's clock), the last possibly open.
#[derive(Default)]
struct Periods(Vec<(u64, Option<u64>)>);

impl Periods {
    fn begin(&mut self, at: u64) {
        self.0.push((at, None));
    }

    fn push_end(&mut self, at: u64) {
        if let Some((_, end @ None)) = self.0.last_mut() {
            *end = Some(at);
        }
    }

    /// Whether `at` lies in one of them (an open one runs to the end).
    fn contains(&self, at: u64) -> bool {
        self.0
            .iter()
            .any(|(begin, end)| *begin <= at && end.is_none_or(|end| at < end))
    }
}

/// The double grants of `pairs` by the last fault that began before the later grant was
/// requested, and whether the earlier holder had renewed its lease.
fn causes(
    pairs: &[(&Grant, &Grant)],
    faults: &[(u64, &'static str)],
) -> BTreeMap<(&'static str, bool), usize> {
    let mut causes = BTreeMap::new();
    for (earlier, later) in pairs {
        let fault = faults
            .iter()
            .take_while(|(began, _)| *began <= later.requested_us)
            .last()
            .map_or("none", |(_, kind)| *kind);
        *causes.entry((fault, earlier.renewed)).or_default() += 1;
    }
    causes
}

impl Run {
    fn stats(&self, class: Class) -> &ClassStats {
        &self.classes[class as usize]
    }
}

/// What the nemesis does to the master.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `kill -9`; it comes back with what its persistence kept (or empty), after the failover or
    /// at once, with its own configuration (as a master) or as a replica.
    Kill,
    /// `kill -9`, and back within a second with its own configuration, before any Sentinel or
    /// replica reached it again: it must know it belongs to a group.
    FastRestart,
    /// `kill -9`, and back at once with the group's original configuration: the first master
    /// as a master, the others as replicas of it (which may itself follow this one).
    RestartOriginal,
    /// `SIGSTOP` past the Sentinels' down-after time, then `SIGCONT`.
    Stop,
    /// Its proxy closes: cut off from replicas, Sentinels and clients until reconnected.
    CutOff,
    /// `SENTINEL FAILOVER`, while the old master keeps running.
    SentinelFailover,
    /// The `FAILOVER` command to a replica, which the module refuses while Sentinels watch (they
    /// would only follow it some 20 s later, after seeing their master report itself a
    /// replica, and it could leave two servers replicating from each other).
    FailoverCommand,
    /// `CLIENT PAUSE 2000 WRITE`.
    ClientPause,
    /// `kill -9` of a replica, which never comes back; a new, empty server takes its place
    /// [`REPLACED_AFTER`] later (meanwhile a cut link instead).
    ReplicaLost,
    /// A replica's link to its master cut for 3 to 25 s, while the Sentinels and the clients
    /// still reach it (long enough, often, for the master to drop it from the in-sync set).
    ReplicaLinkCut,
    /// The master and one replica cut off from the Sentinels and the other replica for 10 to
    /// 40 s, the clients still reaching everyone: a layout without a Sentinel beside each
    /// server (only with `LEASEHOLD_CHAOS_PARTITIONS`).
    SentinelsCutOff,
}

impl Fault {
    const ALL: [Fault; 10] = [
        Fault::Kill,
        Fault::FastRestart,
        Fault::RestartOriginal,
        Fault::Stop,
        Fault::CutOff,
        Fault::SentinelFailover,
        Fault::FailoverCommand,
        Fault::ClientPause,
        Fault::ReplicaLost,
        Fault::ReplicaLinkCut,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill -9 of the master",
            Fault::FastRestart => "kill -9 of the master, back within a second",
            Fault::RestartOriginal => "kill -9 of the master, back with its original configuration",
            Fault::Stop => "SIGSTOP of the master",
            Fault::CutOff => "master cut off",
            Fault::SentinelFailover => "SENTINEL FAILOVER",
            Fault::FailoverCommand => "FAILOVER refused",
            Fault::ClientPause => "CLIENT PAUSE WRITE",
            Fault::ReplicaLost => "replica killed for good",
            Fault::ReplicaLinkCut => "replica's link cut",
            Fault::SentinelsCutOff => "master and a replica cut off from the Sentinels",
        }
    }

    /// Does it to `master`, with the choices `plan` drew for it, and waits for what follows (a
    /// failover, the pause's end); returns what was done, in the words of the summary (a `kill
    /// -9` says how the master came back).
    fn inflict(
        self,
        group: &mut Group,
        master: usize,
        run: &Run,
        plan: &Planned,
        failover_within: Duration,
    ) -> &'static str {
        match self {
            Fault::Kill => {
                group.kill(master);
                // Back after the failover, or at once (a supervisor restarting it, before or
                // while the Sentinels fail over); mostly with its own configuration, so as a
                // master, sometimes as a replica of the new master.
                if plan.after_failover {
                    group.wait_for_failover(master, failover_within);
                } else {
                    thread::sleep(plan.down);
                }
                let replica_of = group
                    .master()
                    .filter(|new| *new != master && plan.as_replica);
                group.restart(master, plan.lost_volume, replica_of);
                return match (replica_of, plan.after_failover, group.persistence[master]) {
                    (Some(_), _, _) => "kill -9, back as a replica",
                    (None, true, _) => "kill -9, back after a failover as a master",
                    (None, false, Persistence::Aof) => "kill -9, back at once from its AOF",
                    (None, false, Persistence::Rdb) => "kill -9, back at once from an older RDB",
                    (None, false, Persistence::Nothing) => "kill -9, back at once empty",
                };
            }
            Fault::FastRestart => {
                group.kill(master);
                thread::sleep(plan.down / 2);
                group.restart(master, false, None);
            }
            Fault::RestartOriginal => group.restart_original(master),
            Fault::Stop => {
                group.servers[master].signal("STOP");
                group.wait_for_failover(master, failover_within);
                group.servers[master].signal("CONT");
            }
            Fault::CutOff => {
                group.cut_off(master);
                group.wait_for_failover(master, failover_within);
                group.reconnect(master);
            }
            Fault::SentinelFailover => {
                let _ = group.sentinel_failover();
                group.wait_for_failover(master, failover_within);
            }
            Fault::ReplicaLost | Fault::ReplicaLinkCut => {
                let replicas = group.live_replicas(master);
                let Some(&replica) = replicas.get(plan.replica % replicas.len().max(1)) else {
                    return "no replica left to fault";
                };
                if matches!(self, Fault::ReplicaLost) && !group.lost_any() {
                    group.lose(replica);
                    return self.name();
                }
                group.cut_link(replica);
                thread::sleep(plan.link_cut);
                group.heal();
                return Fault::ReplicaLinkCut.name();
            }
            Fault::SentinelsCutOff => {
                let replicas = group.live_replicas(master);
                let mut side = vec![master];
                side.extend(replicas.get(plan.replica % replicas.len().max(1)));
                group.partition(&side);
                thread::sleep(plan.partitioned);
                group.heal();
            }
            // Without the module there is nothing to refuse it, and Redis would carry it out.
            Fault::FailoverCommand if run.control => return "FAILOVER not sent (the control)",
            Fault::FailoverCommand => {
                let replicas = group.live_replicas(master);
                let Some(&target) = replicas.get(plan.replica % replicas.len().max(1)) else {
                    return "no replica left to fault";
                };
                let mut con = group.servers[master].client();
                let sent = redis::cmd("FAILOVER")
                    .arg("TO")
                    .arg("127.0.0.1")
                    .arg(group.addresses[target])
                    .arg("TIMEOUT")
                    .arg(3_000)
                    .exec(&mut con);
                match sent {
                    Ok(()) => {
                        run.failovers_let_through.fetch_add(1, Ordering::SeqCst);
                        return "FAILOVER let through";
                    }
                    // Redis's own refusals (the server is a replica by now, the target is not
                    // its replica) leave nothing for the module to refuse.
                    Err(error) if !error.to_string().contains("refused by the lock module") => {
                        return "FAILOVER refused by Redis";
                    }
                    Err(_) => {}
                }
            }
            Fault::ClientPause => {
                let mut con = group.servers[master].client();
                let _ = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(2_000)
                    .arg("WRITE")
                    .exec(&mut con);
                thread::sleep(Duration::from_secs(2));
            }
        }
        self.name()
    }
}

/// One fault of the nemesis's schedule, and every choice it may make, drawn from the seed alone
/// ([`Schedule`]).
struct Planned {
    fault: Fault,
    /// The pause before it.
    gap: Duration,
    /// [`Fault::Kill`]: back after the failover, or at once.
    after_failover: bool,
    /// How long a master killed and back at once stays down ([`Fault::Kill`]; half of it for
    /// [`Fault::FastRestart`]).
    down: Duration,
    /// [`Fault::Kill`]: a server without persistence comes back empty.
    lost_volume: bool,
    /// [`Fault::Kill`]: back as a replica of the new master, if there is one.
    as_replica: bool,
    /// Which live replica a fault takes (a replica's, the `FAILOVER` command's target, the
    /// partition's side): this modulo their number.
    replica: usize,
    /// How long a replica's link is cut ([`Fault::ReplicaLinkCut`]).
    link_cut: Duration,
    /// How long the partition lasts ([`Fault::SentinelsCutOff`]).
    partitioned: Duration,
    /// Whether the next fault waits for the group to settle after this one.
    settle: bool,
    /// When a replica this fault loses for good is replaced.
    replaced_after: Duration,
}

/// The nemesis's faults in order, from the seed alone: every kind once per round in a random
/// order, each with a pause before it and every choice it may make. Each fault draws the same
/// choices whether it uses them or not, and nothing the group does is drawn from here, so a
/// seed gives the same faults in the same order, each after the same pause, with the module
/// and in its control (`LEASEHOLD_CHAOS_CONTROL`).
struct Schedule {
    rng: StdRng,
    round: Vec<Fault>,
}

impl Schedule {
    fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            round: Vec::new(),
        }
    }

    fn next(&mut self) -> Planned {
        if self.round.is_empty() {
            self.round = Fault::ALL.to_vec();
            if partitions() {
                // Three nodes throughout: the partition needs a replica on each side.
                self.round
                    .retain(|fault| !matches!(fault, Fault::ReplicaLost));
                self.round.push(Fault::SentinelsCutOff);
            }
            self.round.shuffle(&mut self.rng);
        }
        let fault = self.round.pop().expect("a fault");
        let rng = &mut self.rng;
        let ms =
            |rng: &mut StdRng, range: Range<u64>| Duration::from_millis(rng.random_range(range));
        // Drawn in this order (a struct's fields are evaluated as written).
        Planned {
            fault,
            gap: ms(rng, 500..2_000),
            after_failover: rng.random_bool(0.5),
            down: ms(rng, 0..2_000),
            lost_volume: rng.random_bool(0.5),
            as_replica: rng.random_bool(0.3),
            replica: rng.random_range(0..1_000_000),
            link_cut: ms(rng, 3_000..25_000),
            partitioned: ms(rng, 10_000..40_000),
            settle: rng.random_bool(0.5),
            replaced_after: ms(rng, REPLACED_AFTER),
        }
    }
}

/// Faults the master as the [`Schedule`] of `seed` says until `length` is over, half the time
/// without waiting for the group to settle from the last one; returns the faults by kind, and
/// keeps the schedule it followed in `run`.
fn nemesis(
    group: &mut Group,
    history: &History,
    run: &Run,
    (length, timing): (Duration, Timing),
    seed: u64,
) -> BTreeMap<&'static str, u64> {
    // A failover takes `down-after-milliseconds` and some seconds more.
    let down_after = Duration::from_millis(timing.down_after_ms);
    let mut schedule = Schedule::new(seed);
    // A pause that no fault follows (no master yet, or a replica replaced first) is drawn from
    // a stream of its own, so that the schedule does not move.
    let mut retries = StdRng::seed_from_u64(seed ^ RETRIES);
    let started = Instant::now();
    let mut faults = BTreeMap::new();
    let mut plan = schedule.next();
    let mut pause = plan.gap;
    // A replica lost for good, and when a new one takes its place.
    let mut replacement: Option<(usize, Instant)> = None;
    while started.elapsed() < length {
        thread::sleep(pause);
        pause = Duration::from_millis(retries.random_range(500..2_000));
        let Some(master) = group.master() else {
            continue;
        };
        if let Some((lost, due)) = replacement
            && Instant::now() >= due
            && lost != master
        {
            group.replace(lost, master);
            run.lost_periods
                .lock()
                .expect("lost periods")
                .push_end(history.now_us());
            *faults
                .entry("lost replica replaced by an empty one")
                .or_default() += 1;
            replacement = None;
            continue;
        }
        let began = history.now_us();
        let fault = plan.fault;
        let done = fault.inflict(group, master, run, &plan, down_after + FAILOVER_MARGIN);
        run.faults.lock().expect("faults").push((began, done));
        run.schedule
            .lock()
            .expect("schedule")
            .push(format!("+{}ms:{fault:?}", plan.gap.as_millis()));
        *faults.entry(done).or_default() += 1;
        if done == Fault::ReplicaLost.name()
            && let Some(&lost) = group.lost_servers().first()
        {
            run.lost_periods.lock().expect("lost periods").begin(began);
            replacement = Some((lost, Instant::now() + plan.replaced_after));
        }
        // Half the time the next fault waits for the group to settle (the Sentinels make an old
        // master a replica some seconds later); the other half it comes while they still
        // reconfigure, as a nemesis in production would.
        // Each fault on the run's clock, to read beside the servers' logs
        // (`LEASEHOLD_KEEP_LOGS`); servers are named by their proxied and own ports.
        eprintln!(
            "chaos +{:.1}s: {done}, master was server {master} (ports {} and {})",
            started.elapsed().as_secs_f64(),
            group.addresses[master],
            group.servers[master].port
        );
        let settled = plan.settle && group.settle(down_after + SETTLE_MARGIN);
        if settled {
            eprintln!("chaos +{:.1}s: settled", started.elapsed().as_secs_f64());
        }
        if plan.settle && !settled {
            eprintln!(
                "chaos: not settled {:?} after {done}: {}",
                down_after + SETTLE_MARGIN,
                group.describe()
            );
            *faults.entry("group did not settle").or_default() += 1;
            // The person on call, paged, runs what the module names (a replication cycle); in
            // the control no INFO lock names anything, and they do nothing.
            if !run.control
                && let Some(server) = group.run_what_the_module_names()
            {
                eprintln!("chaos: ran REPLICAOF NO ONE on server {server}, as INFO lock named");
                let ran = "REPLICAOF NO ONE, as INFO lock named (not settled)";
                run.faults
                    .lock()
                    .expect("faults")
                    .push((history.now_us(), ran));
                *faults.entry(ran).or_default() += 1;
            }
        }
        plan = schedule.next();
        pause = plan.gap;
    }
    faults
}

/// The nemesis's faults in the order it did them, each as the pause before it and its kind
/// (`+812ms:Kill`): the same seed's run with the module and its control print the same, but
/// for where each ended.
fn schedule_line(seed: u64, run: &Run) -> String {
    let schedule = run.schedule.lock().expect("schedule");
    format!(
        "chaos schedule (seed {seed}): {} faults: {}",
        schedule.len(),
        schedule.join(" ")
    )
}

/// One client: finds the master through Sentinel, then acquires (through `leasehold-client`,
/// syncing grants and renewals as its class says), writes, renews, and releases random locks
/// of its class — holding each for several leases if `long` — recording every grant; on any
/// other error it asks Sentinel again.
fn client(
    id: u64,
    (class, long): (Class, bool),
    sentinel_urls: &[String],
    history: &History,
    run: &Run,
) {
    let mut rng = StdRng::seed_from_u64(id);
    let mut sentinel = redis::sentinel::Sentinel::build(sentinel_urls.to_vec()).expect("urls");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut last: Option<Client> = None;
    while !run.stop.load(Ordering::SeqCst) {
        let Ok((client, server)) = connect_to_master(&mut sentinel, &runtime, last.as_ref()) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        last = Some(client.clone());
        while !run.stop.load(Ordering::SeqCst) {
            let exclusive = long || rng.random_bool(0.7);
            // A fifth of the exclusive holdings are sets of two locks (`LOCK.MACQUIRE`).
            let count = if exclusive && rng.random_bool(0.2) {
                2
            } else {
                1
            };
            let attempt = Attempt {
                locks: index::sample(&mut rng, LOCKS, count)
                    .into_iter()
                    .map(|n| format!("{}-lock-{n}", class.name()))
                    .collect(),
                class,
                exclusive,
                wait: rng.random_bool(0.5),
                stall: rng.random_bool(0.002),
                renew: rng.random_bool(0.5),
                hold: if long {
                    LEASE * rng.random_range(2..=3)
                } else {
                    Duration::ZERO
                },
            };
            run.operations.fetch_add(1, Ordering::SeqCst);
            if runtime
                .block_on(hold(&client, server, &attempt, history, run))
                .is_err()
            {
                break;
            }
        }
    }
}

/// Starts [`plain_writer`] on `group`.
fn spawn_plain_writer(
    group: &Group,
    history: &Arc<History>,
    run: &Arc<Run>,
) -> thread::JoinHandle<()> {
    let (urls, history, run) = (group.sentinel_urls(), Arc::clone(history), Arc::clone(run));
    thread::spawn(move || plain_writer(&urls, &history, &run))
}

/// How long the plain `SET` worker waits between writes, and for a connection or a reply.
const PLAIN_PAUSE: Duration = Duration::from_millis(15);
const PLAIN_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the plain `SET` worker asks Sentinel which master to write to, while it writes.
const PLAIN_ASK_EVERY: Duration = Duration::from_millis(250);

/// Redis's own availability, measured as an application would: finds the master through
/// Sentinel (as the clients do), then `SET chaos:plain:<n> <µs>` (`n` the write's number modulo
/// 1 000, so that the data stays small) every [`PLAIN_PAUSE`] with a
/// [`PLAIN_TIMEOUT`], recording when each write succeeded and on which server; on any error
/// (`READONLY` from a master turned replica, a timeout, a closed connection), or when Sentinel
/// names another master (asked every [`PLAIN_ASK_EVERY`]), it connects to the one Sentinel
/// names. In every run, with the module and in the control ([`writable`]).
fn plain_writer(sentinel_urls: &[String], history: &History, run: &Run) {
    let mut sentinel = redis::sentinel::Sentinel::build(sentinel_urls.to_vec()).expect("urls");
    let mut n: u64 = 0;
    while !run.stop.load(Ordering::SeqCst) {
        let Ok((host, port)) = master_address(&mut sentinel) else {
            thread::sleep(PLAIN_PAUSE);
            continue;
        };
        let Ok(mut con) = redis::Client::open(format!("redis://{host}:{port}"))
            .and_then(|client| client.get_connection_with_timeout(PLAIN_TIMEOUT))
        else {
            thread::sleep(PLAIN_PAUSE);
            continue;
        };
        let _ = con.set_read_timeout(Some(PLAIN_TIMEOUT));
        let _ = con.set_write_timeout(Some(PLAIN_TIMEOUT));
        let mut asked = Instant::now();
        while !run.stop.load(Ordering::SeqCst) {
            n += 1;
            let set = redis::cmd("SET")
                .arg(format!("chaos:plain:{}", n % 1_000))
                .arg(history.now_us())
                .exec(&mut con);
            if set.is_err() {
                thread::sleep(PLAIN_PAUSE);
                break;
            }
            run.plain_writes
                .lock()
                .expect("plain writes")
                .push((history.now_us(), port));
            // An old master back before the Sentinels demote it takes writes (that its
            // demotion discards): move to the one they name, as Jedis and Lettuce do on
            // `+switch-master`.
            if asked.elapsed() >= PLAIN_ASK_EVERY {
                asked = Instant::now();
                if master_address(&mut sentinel).is_ok_and(|(_, named)| named != port) {
                    break;
                }
            }
            thread::sleep(PLAIN_PAUSE);
        }
    }
}

/// A client of the master Sentinel names now — the same client as `last` following a
/// failover, if there was one — and its port (the one everyone reaches it on).
fn connect_to_master(
    sentinel: &mut redis::sentinel::Sentinel,
    runtime: &tokio::runtime::Runtime,
    last: Option<&Client>,
) -> Result<(Client, u16), Box<dyn std::error::Error>> {
    let (host, port) = master_address(sentinel)?;
    let url = format!("redis://{host}:{port}");
    let client = match last {
        Some(last) => runtime.block_on(last.reopen(&url))?,
        None => runtime.block_on(Client::open(&url))?,
    };
    Ok((client, port))
}

/// The host and port of the master Sentinel names now.
fn master_address(
    sentinel: &mut redis::sentinel::Sentinel,
) -> Result<(String, u16), Box<dyn std::error::Error>> {
    let master = sentinel.master_for(MASTER_NAME, None)?;
    let ConnectionAddr::Tcp(host, port) = master.get_connection_info().addr().clone() else {
        unreachable!("the group listens on TCP");
    };
    Ok((host, port))
}

/// What one loop of a client does.
struct Attempt {
    /// One lock, or two distinct ones taken together as a set.
    locks: Vec<String>,
    class: Class,
    exclusive: bool,
    wait: bool,
    /// Freeze past the lease while holding, then write late.
    stall: bool,
    /// Renew once explicitly (a short holding).
    renew: bool,
    /// How long to hold while the watchdog renews (zero: a short holding).
    hold: Duration,
}

/// Holds one lock or a set once: acquire (a new owner each time), write, renew, release; each
/// lock of a set is recorded as a grant of its own, with its own token. Busy and
/// `NotReplicated` are outcomes; any other error ends the connection.
async fn hold(
    client: &Client,
    server: u16,
    attempt: &Attempt,
    history: &History,
    run: &Run,
) -> leasehold_client::Result<()> {
    let names: Vec<&str> = attempt.locks.iter().map(String::as_str).collect();
    let sync = attempt.class.sync();
    let lock = match names[..] {
        [name] if !attempt.exclusive => ReadWriteLock::new(client, name)
            .with_sync(sync)
            .read()
            .clone(),
        [name] => Lock::new(client, name).with_sync(sync),
        _ => Lock::multi(client, &names).with_sync(sync),
    };
    let lock = lock.with_watchdog(true);
    let requested_us = history.now_us();
    let acquired = if attempt.wait {
        lock.acquire_timeout(LEASE, QUEUE_WAIT).await
    } else {
        lock.try_acquire(LEASE).await
    };
    let stats = run.stats(attempt.class);
    let Some(guard) = granted_or_refused(acquired, stats)? else {
        return Ok(());
    };
    let acknowledged_us = history.now_us();
    stats.granted(acknowledged_us - requested_us);
    if attempt.locks.len() > 1 {
        run.sets.fetch_add(1, Ordering::SeqCst);
    }
    let granted_lease_end = guard.lease_end();
    let tokens: Vec<i64> = guard
        .tokens()
        .iter()
        .map(|token| i64::try_from(*token).expect("below 2^53"))
        .collect();
    let write = || {
        if attempt.exclusive {
            for (lock, token) in attempt.locks.iter().zip(&tokens) {
                run.store.write(lock, *token);
            }
        }
    };
    if attempt.stall {
        run.stalls.fetch_add(1, Ordering::SeqCst);
        // The whole client freezes, its watchdog with it (one thread runs them both).
        thread::sleep(LEASE * 2);
    }
    write();
    let renewed = if attempt.renew && attempt.hold.is_zero() {
        match guard.renew(LEASE).await {
            Err(Error::NotReplicated { .. }) => {
                stats.renewals_refused.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            other => other.map(drop),
        }
    } else {
        let held = (|| guard.lost(), || guard.is_held());
        work_while_held(held, attempt.hold, write, stats).await;
        Ok(())
    };
    // The client stops counting on the lock when it sends the release, or when the lease it
    // counts on (the grant's, or the last renewal's that counted) ends.
    let lease_end_us = history.at_us(guard.lease_end().into_std());
    let held_until_us = history.now_us().min(lease_end_us);
    for (lock, token) in attempt.locks.iter().zip(tokens.iter().copied()) {
        history.record(Grant {
            lock: lock.clone(),
            token,
            server,
            requested_us,
            acknowledged_us,
            exclusive: attempt.exclusive,
            held_until_us,
            renewed: guard.lease_end() > granted_lease_end,
        });
    }
    renewed?;
    guard.release().await.map(drop)
}

/// What an acquire or a campaign came to: its holding, none (busy, or `NotReplicated`, which
/// `stats` counts), or the error that ends the connection.
fn granted_or_refused<T>(
    acquired: leasehold_client::Result<Option<T>>,
    stats: &ClassStats,
) -> leasehold_client::Result<Option<T>> {
    match acquired {
        Err(Error::NotReplicated { reason, .. }) => {
            stats.refused(&reason);
            Ok(None)
        }
        other => other,
    }
}

/// Candidates of each class's election, each campaigning in turn.
const CANDIDATES_PER_CLASS: u64 = 2;

/// A candidate of the class's election (`<class>-election`, so its terms count with the class's
/// grants): campaigns (in line for up to [`QUEUE_WAIT`]), leads for one to three leases while the
/// watchdog renews, writing its epoch to the fenced store each third of a lease, then resigns;
/// reconnects to the master the Sentinels name after an error. Each term is recorded as a grant
/// of the election's key, with its epoch as the token.
fn candidate(seed: u64, class: Class, sentinel_urls: &[String], history: &History, run: &Run) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sentinel = redis::sentinel::Sentinel::build(sentinel_urls.to_vec()).expect("urls");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let key = format!("{}-election", class.name());
    let mut last: Option<Client> = None;
    while !run.stop.load(Ordering::SeqCst) {
        let Ok((client, server)) = connect_to_master(&mut sentinel, &runtime, last.as_ref()) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        last = Some(client.clone());
        let election = Election::new(&client, &key, LEASE).with_sync(class.sync());
        while !run.stop.load(Ordering::SeqCst) {
            let lead_for = LEASE * rng.random_range(1..=3);
            let term = lead(&election, (class, server), lead_for, history, run);
            if runtime.block_on(term).is_err() {
                break;
            }
        }
    }
}

/// One campaign of `election` (of `class`, on the master at port `server`) and, when it wins,
/// one term of `lead_for`, recorded as a grant.
async fn lead(
    election: &Election,
    (class, server): (Class, u16),
    lead_for: Duration,
    history: &History,
    run: &Run,
) -> leasehold_client::Result<()> {
    let stats = run.stats(class);
    let requested_us = history.now_us();
    let campaign = election.campaign_timeout("leader", QUEUE_WAIT).await;
    let Some(leadership) = granted_or_refused(campaign, stats)? else {
        return Ok(());
    };
    let acknowledged_us = history.now_us();
    stats.granted(acknowledged_us - requested_us);
    run.terms.fetch_add(1, Ordering::SeqCst);
    let granted_lease_end = leadership.lease_end();
    let epoch = i64::try_from(leadership.epoch()).expect("below 2^53");
    let name = election.name().to_owned();
    let write = || {
        run.store.write(&name, epoch);
    };
    let held = (|| leadership.lost(), || leadership.is_held());
    work_while_held(held, lead_for, write, stats).await;
    let lease_end_us = history.at_us(leadership.lease_end().into_std());
    history.record(Grant {
        lock: name,
        token: epoch,
        server,
        requested_us,
        acknowledged_us,
        exclusive: true,
        held_until_us: history.now_us().min(lease_end_us),
        renewed: leadership.lease_end() > granted_lease_end,
    });
    leadership.resign().await.map(drop)
}

/// An observer of the class's election: `LOCK.OBSERVE ... LAST epoch value BLOCK 1000` on the
/// master the Sentinels name, passing what it saw last across reconnections and failovers;
/// counts the states it is told, and those where a leader follows another term's leader with
/// no vacancy between (which the server's rule never allows).
fn observer(class: Class, sentinel_urls: &[String], run: &Run) {
    let mut sentinel = redis::sentinel::Sentinel::build(sentinel_urls.to_vec()).expect("urls");
    let key = format!("{}-election", class.name());
    let mut last: (i64, Vec<u8>) = (0, Vec::new());
    while !run.stop.load(Ordering::SeqCst) {
        let Ok((host, port)) = master_address(&mut sentinel) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        let Ok(mut con) = redis::Client::open(format!("redis://{host}:{port}"))
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
        else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = con.set_read_timeout(Some(Duration::from_secs(3)));
        while !run.stop.load(Ordering::SeqCst) {
            let told: redis::RedisResult<Option<std::collections::HashMap<String, Value>>> =
                redis::cmd("LOCK.OBSERVE")
                    .arg(&key)
                    .arg("LAST")
                    .arg(last.0)
                    .arg(&last.1)
                    .arg("BLOCK")
                    .arg(1_000)
                    .query(&mut con);
            let Ok(told) = told else { break };
            let Some(fields) = told else { continue };
            let epoch = match fields.get("epoch") {
                Some(Value::Int(epoch)) => *epoch,
                _ => 0,
            };
            let value = match fields.get("value") {
                Some(Value::BulkString(value)) => value.clone(),
                _ => Vec::new(),
            };
            run.observed.fetch_add(1, Ordering::SeqCst);
            if epoch != 0 && last.0 != 0 && epoch != last.0 {
                run.out_of_order.fetch_add(1, Ordering::SeqCst);
                eprintln!(
                    "chaos observer of {key}: term {epoch} right after term {}",
                    last.0
                );
            }
            last = (epoch, value);
        }
    }
}

/// Holds for `hold` while the watchdog renews — a lock's guard or an election's leadership,
/// given as its `lost` signal and its `is_held` — writing each third of a lease; stops as soon
/// as the holding is reported lost (and counts it).
async fn work_while_held<L: Future<Output = ()>>(
    (lost, is_held): (impl Fn() -> L, impl Fn() -> bool),
    hold: Duration,
    write: impl Fn(),
    stats: &ClassStats,
) {
    let until = tokio::time::Instant::now() + hold;
    while tokio::time::Instant::now() < until {
        tokio::select! {
            () = lost() => {
                stats.lost.fetch_add(1, Ordering::SeqCst);
                return;
            }
            () = tokio::time::sleep(LEASE / 3) => {
                if is_held() {
                    write();
                }
            }
        }
    }
}

/// A killed holder's session grace.
const SESSION_GRACE: Duration = Duration::from_millis(1_000);
/// A killed holder's lease, five of the clients': its session, not its lease, should end the
/// holding (the kill comes within a second of the grant).
const KILLED_LEASE: Duration = Duration::from_secs(5);
/// How long a holder process holds before its `kill -9`, ms: less than the grace, so the kill
/// comes before its session's deadline (from the heartbeat after the grant).
const HOLD_MS: Range<u64> = 50..800;
/// How long a crasher pauses between holder processes, ms.
const CRASHER_PAUSE_MS: Range<u64> = 0..2_000;
/// A hand-over within the grace and this long after the kill was the session's.
const SESSION_SLACK: Duration = Duration::from_millis(200);
/// How early a hand-over may come, against the grace or the lease, and still count as theirs:
/// the server's timers and the kill's timing are not exact.
const EDGE: Duration = Duration::from_millis(50);

/// A holder process's script (`$1` host, `$2` port): a connection of its own to the server
/// (bash's `/dev/tcp`); each line of stdin is sent on it as an inline command and the reply
/// written to stdout as it came (RESP2). It waits on builtins only, so no other process shares
/// the socket and `kill -9` closes it; it ends by itself when stdin closes (the test is gone) or
/// a reply takes over 5 s (a stopped server).
const HOLDER_SCRIPT: &str = r#"exec 3<>"/dev/tcp/$1/$2" || exit 1
reply() {
  local line n i
  IFS= read -r -t 5 line <&3 || exit 1
  printf '%s\n' "$line"
  case $line in
    '$-'* | '*-'*) ;;
    '$'*) IFS= read -r -t 5 line <&3 || exit 1; printf '%s\n' "$line" ;;
    '*'*) n=${line#?}; n=${n%$'\r'}; for ((i = 0; i < n; i++)); do reply; done ;;
  esac
}
while IFS= read -r command; do printf '%s\r\n' "$command" >&3; reply; done"#;

/// A running holder process ([`HOLDER_SCRIPT`]); dropping it kills and reaps it, so none
/// outlives its crasher, on a panic too.
struct HolderProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    parser: redis::Parser,
}

impl HolderProcess {
    /// Starts one connected to the server at `host`:`port`.
    fn spawn(host: &str, port: u16) -> Self {
        let mut child = Command::new("bash")
            .args(["-c", HOLDER_SCRIPT, "holder", host, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("bash");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self {
            child,
            stdin,
            stdout,
            parser: redis::Parser::new(),
        }
    }

    /// Sends `command` (words without spaces, separated by one) on the process's connection:
    /// its reply, or `None` once the process ended (its connection closed, or a reply was late).
    fn call(&mut self, command: &str) -> Option<Value> {
        writeln!(self.stdin, "{command}").ok()?;
        self.parser.parse_value(&mut self.stdout).ok()
    }

    /// True while it runs: it has not ended by itself.
    fn runs(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`, and reaps it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HolderProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long a lease or a session's grace of `ttl` counts for its holder: less
/// `leasehold-client`'s clock drift allowance (1 % and 2 ms).
fn counted(ttl: Duration) -> Duration {
    ttl.saturating_sub(ttl.mul_f64(DRIFT_FACTOR) + Duration::from_millis(2))
}

/// Whether the grant a holder process just got counts, synced as `class`'s clients sync theirs:
/// the default class's acquire said `SYNC`, so its token came once the in-sync set had it
/// (a refusal is an error, not a token); synced to 1 replica waits for it behind the grant.
fn counts(process: &mut HolderProcess, class: Class) -> bool {
    match class {
        Class::NotSynced | Class::InSync => true,
        Class::OneReplica => {
            matches!(process.call(&wait_command(1)), Some(Value::Int(acked)) if acked >= 1)
        }
    }
}

/// What a holder process's acquire says about syncing, as `class`'s clients say it.
const fn sync_option(class: Class) -> &'static str {
    match class {
        Class::InSync => "SYNC",
        Class::NotSynced | Class::OneReplica => "NOSYNC",
    }
}

/// `WAIT replicas timeout`, with the client's default sync timeout.
fn wait_command(replicas: u64) -> String {
    format!("WAIT {replicas} {}", Sync::DEFAULT_TIMEOUT.as_millis())
}

/// A crasher of `class`: every second or so a holder process on the master Sentinel names takes
/// one of the class's locks and is killed with `kill -9` ([`hold_and_die`]).
fn crasher(seed: u64, class: Class, sentinel_urls: &[String], history: &History, run: &Run) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sentinel = redis::sentinel::Sentinel::build(sentinel_urls.to_vec()).expect("urls");
    while !run.stop.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(rng.random_range(CRASHER_PAUSE_MS)));
        let Ok((host, port)) = master_address(&mut sentinel) else {
            continue;
        };
        let number = run.holder_processes.fetch_add(1, Ordering::SeqCst);
        let holder = Holder {
            lock: format!("{}-lock-{}", class.name(), rng.random_range(0..LOCKS)),
            owner: format!("killed-holder-{number}"),
            class,
            server: port,
        };
        let mut process = HolderProcess::spawn(&host, port);
        hold_and_die(&mut process, holder, &mut rng, history, run);
    }
}

/// What a holder process takes, and where.
struct Holder {
    lock: String,
    owner: String,
    class: Class,
    /// The port of the master it connected to.
    server: u16,
}

/// One holder process's life: it opens a session, queues for the lock with `WAIT`, tied to the
/// session, counts the grant as its class does, sends a heartbeat (`ATTACH`), holds a short
/// random time, and is killed with `kill -9`. A grant that counted is written to the fenced store
/// and recorded, believed until the kill — or the end of its session's grace, from the last
/// heartbeat's send, or of its lease, less the drift allowance, if earlier. Every kill of a
/// running holder is kept, to time the hand-over.
fn hold_and_die(
    process: &mut HolderProcess,
    holder: Holder,
    rng: &mut StdRng,
    history: &History,
    run: &Run,
) {
    let mut heartbeat = Instant::now();
    let open = format!("LOCK.SESSION OPEN GRACE {}", SESSION_GRACE.as_millis());
    let Some(Value::Array(opened)) = process.call(&open) else {
        return;
    };
    let Some(Ok(id)) = opened
        .into_iter()
        .next()
        .map(redis::from_redis_value::<String>)
    else {
        return;
    };
    let requested_us = history.now_us();
    let acquire = format!(
        "LOCK.ACQUIRE {} {} {} WAIT {} SESSION {id} {}",
        holder.lock,
        holder.owner,
        KILLED_LEASE.as_millis(),
        QUEUE_WAIT.as_millis(),
        sync_option(holder.class)
    );
    let Some(Value::Int(token)) = process.call(&acquire) else {
        return;
    };
    // The lease counts from the reply: the server replies the moment it hands the lock over,
    // or, holding a synced reply, made the grant that much longer.
    let granted = Instant::now();
    let synced = counts(process, holder.class);
    let acknowledged_us = history.now_us();
    let sent = Instant::now();
    if let Some(Value::Int(_)) = process.call(&format!("LOCK.SESSION ATTACH {id}")) {
        heartbeat = sent;
    }
    if synced {
        run.store.write(&holder.lock, token);
    }
    thread::sleep(Duration::from_millis(rng.random_range(HOLD_MS)));
    let killed = process.runs();
    process.kill();
    let killed_us = history.now_us();
    let believed = (heartbeat + counted(SESSION_GRACE)).min(granted + counted(KILLED_LEASE));
    if synced {
        history.record(Grant {
            lock: holder.lock.clone(),
            token,
            server: holder.server,
            requested_us,
            acknowledged_us,
            exclusive: true,
            held_until_us: killed_us.min(history.at_us(believed)),
            renewed: false,
        });
    }
    // One that ended by itself (a reply it waited 5 s for) is not timed.
    if killed {
        run.kills.lock().expect("kills").push(Kill {
            lock: holder.lock,
            granted_us: history.at_us(granted),
            killed_us,
            synced,
        });
    }
}

/// A holder process killed while it held its lock (µs on the history's clock).
struct Kill {
    lock: String,
    granted_us: u64,
    killed_us: u64,
    /// Whether its grant counted (synced as its class's are), and so was recorded.
    synced: bool,
}

/// How a killed holder's lock passed on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HandOver {
    /// Within the grace and [`SESSION_SLACK`] of the kill: its session ended.
    Session,
    /// At its lease's end or later: its session was gone (a failover, a restart).
    Lease,
    /// Before the grace ended: a fault had ended the holding (a master back without it).
    Early,
    /// Between the two: a fault delayed the next grant.
    Delayed,
}

impl Kill {
    /// The µs from the kill to the next grant of the lock to anyone in `grants` (those of the
    /// designated masters: a server Sentinel already replaced grants on beside them, in a split
    /// brain), and how it passed on; `None` if it was granted to no one after.
    fn hand_over(&self, grants: &[&Grant]) -> Option<(u64, HandOver)> {
        let next = grants
            .iter()
            .filter(|grant| grant.lock == self.lock && grant.acknowledged_us > self.killed_us)
            .map(|grant| grant.acknowledged_us)
            .min()?;
        let us = |duration: Duration| u64::try_from(duration.as_micros()).expect("short");
        let after = next - self.killed_us;
        let how = if after + us(EDGE) < us(SESSION_GRACE) {
            HandOver::Early
        } else if after <= us(SESSION_GRACE + SESSION_SLACK) {
            HandOver::Session
        } else if next + us(EDGE) >= self.granted_us + us(KILLED_LEASE) {
            HandOver::Lease
        } else {
            HandOver::Delayed
        };
        Some((after, how))
    }
}

/// The summary line on the killed holders: how many, how long their locks took to pass on
/// (from the kill to the next grant to anyone by a designated master, of `grants`), and how.
fn killed_holders(kills: &[Kill], grants: &[&Grant], processes: u64) -> String {
    let handed: Vec<(u64, HandOver)> = kills
        .iter()
        .filter_map(|kill| kill.hand_over(grants))
        .collect();
    let times: Vec<u64> = handed.iter().map(|(us, _)| *us).collect();
    let count = |how: HandOver| handed.iter().filter(|(_, was)| *was == how).count();
    format!(
        "chaos killed holders: {} of {processes} holder processes killed with kill -9 while \
         holding ({} of their grants counted as their class's, and were checked); grace {} ms, \
         lease {} ms; from the kill to the next grant by the designated master p50 {:.0} ms p99 \
         {:.0} ms max {:.0} ms: {} by the session (within the grace + {} ms), {} at the lease's \
         end (the session was lost: a failover or restart), {} before the grace (a fault had \
         ended the holding), {} in between (a fault delayed the next grant that counted), {} \
         none by the end",
        kills.len(),
        kills.iter().filter(|kill| kill.synced).count(),
        SESSION_GRACE.as_millis(),
        KILLED_LEASE.as_millis(),
        quantile_ms(times.clone(), 0.5),
        quantile_ms(times.clone(), 0.99),
        quantile_ms(times, 1.0),
        count(HandOver::Session),
        SESSION_SLACK.as_millis(),
        count(HandOver::Lease),
        count(HandOver::Early),
        count(HandOver::Delayed),
        kills.len() - handed.len(),
    )
}
