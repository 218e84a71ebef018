//! How fast a master killed for good (`kill -9`) is replaced, with the module and without it —
//! Redis and Sentinel alone, the baseline — at Redis's own timeouts (Sentinel's
//! `down-after-milliseconds` 30 000 and `failover-timeout` 180 000, Cluster's
//! `cluster-node-timeout` 15 000) and at shorter ones; and how long a replica lost for good
//! stops grants synced to the in-sync set. The module's target: replaced within the time Redis
//! itself takes plus 10 s, and a lost replica costing at most `down-after-milliseconds` + 10 s.
//!
//! Each case runs [`TRIALS`] times in a row (real servers and Sentinels on loopback, the harness
//! of `tests/common/`), the cases side by side; the figures are the median with the least and
//! the most. With the module, every lock counted before the kill is checked on the new master.
//! Run by `make bench`; prints Markdown rows.

#[path = "../tests/common/mod.rs"]
mod common;

use std::thread;
use std::time::Duration;

use common::failover::{
    cluster_replaces_master, lost_replica_stops_synced_grants, sentinel_replaces_master,
};
use common::sentinel::Timing;

/// Runs of each case.
const TRIALS: usize = 3;

/// The longest a failover may take before a trial counts as none.
const WITHIN: Duration = Duration::from_secs(120);

/// What one case measures: how long, in one trial, or `None` for no failover at all.
type Trial = Box<dyn Fn() -> Option<Duration> + Send>;

/// The cases, as (the row's name, with the module?, the trial).
fn cases() -> Vec<(String, bool, Trial)> {
    let mut cases: Vec<(String, bool, Trial)> = Vec::new();
    for (name, timing) in [
        (
            "Sentinel, `down-after-milliseconds` 30 000 (its default), `failover-timeout` 180 000",
            Timing::DEFAULT,
        ),
        (
            "Sentinel, `down-after-milliseconds` 5 000",
            Timing::FIVE_SECONDS,
        ),
    ] {
        for module in [false, true] {
            let trial = move || sentinel_replaces_master(timing, (module, false), WITHIN);
            cases.push((name.to_owned(), module, Box::new(trial)));
        }
    }
    for (name, node_timeout) in [
        (
            "Redis Cluster, `cluster-node-timeout` 15 000 (its default)",
            15_000,
        ),
        ("Redis Cluster, `cluster-node-timeout` 5 000", 5_000),
    ] {
        for module in [false, true] {
            let trial = move || {
                Some(cluster_replaces_master(
                    node_timeout,
                    (module, None),
                    WITHIN,
                ))
            };
            cases.push((name.to_owned(), module, Box::new(trial)));
        }
    }
    cases
}

/// `ms` as seconds, one decimal.
fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

/// The median of `trials` with the least and the most, or how many found no failover.
fn summary(mut trials: Vec<Option<Duration>>) -> (Option<Duration>, String) {
    let failed = trials.iter().filter(|trial| trial.is_none()).count();
    let mut done: Vec<Duration> = trials.drain(..).flatten().collect();
    done.sort_unstable();
    let Some(median) = done.get(done.len() / 2).copied() else {
        return (None, format!("none in {failed} trials"));
    };
    let range = format!(
        "{} ({}–{})",
        seconds(median),
        seconds(done[0]),
        seconds(done[done.len() - 1])
    );
    let text = if failed > 0 {
        format!("{range}; {failed} trials without one")
    } else {
        range
    };
    (Some(median), text)
}

fn main() {
    let handles: Vec<_> = cases()
        .into_iter()
        .map(|(name, module, trial)| {
            thread::spawn(move || {
                let trials = (0..TRIALS).map(|_| trial()).collect();
                (name, module, summary(trials))
            })
        })
        .collect();
    let lost: Vec<_> = [
        ("30 000 (its default)", Timing::DEFAULT),
        ("5 000", Timing::FIVE_SECONDS),
    ]
    .into_iter()
    .map(|(name, timing)| {
        thread::spawn(move || {
            let trials = (0..TRIALS)
                .map(|_| Some(lost_replica_stops_synced_grants(timing)))
                .collect();
            (name, timing, summary(trials))
        })
    })
    .collect();
    let mut rows: Vec<(String, bool, (Option<Duration>, String))> = handles
        .into_iter()
        .map(|handle| handle.join().expect("a case"))
        .collect();
    println!(
        "| deployment | Redis alone: a replica promoted after | with the module | the module adds |"
    );
    println!("| --- | ---: | ---: | ---: |");
    rows.sort_by_key(|(name, module, _)| (name.clone(), *module));
    for pair in rows.chunks(2) {
        let [(name, _, (alone, alone_text)), (_, _, (with, with_text))] = pair else {
            continue;
        };
        let added = match (alone, with) {
            (Some(alone), Some(with)) => {
                format!("{:+.1} s", with.as_secs_f64() - alone.as_secs_f64())
            }
            _ => "—".to_owned(),
        };
        println!("| {name} | {alone_text} | {with_text} | {added} |");
    }
    println!();
    println!(
        "| Sentinel's `down-after-milliseconds` | a replica lost for good: synced grants count again after | target |"
    );
    println!("| --- | ---: | --- |");
    for handle in lost {
        let (name, timing, (median, text)) = handle.join().expect("a case");
        let bound = Duration::from_millis(timing.down_after_ms + 10_000);
        let met = median.is_some_and(|median| median <= bound);
        println!(
            "| {name} | {text} | ≤ {} {} |",
            seconds(bound),
            if met { "met" } else { "NOT met" }
        );
    }
}
