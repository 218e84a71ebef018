//! Fencing tokens under real Sentinel failovers: a master and two replicas with the module
//! (AOF on the master, RDB on one replica, nothing on the other), three Sentinels, clients
//! that find the master through Sentinel, and the master repeatedly killed (`kill -9`), frozen
//! (`SIGSTOP`) or crashed and restarted at once, for about 30 s. Over the recorded history: no server ever issues a token
//! at or below one it issued before (across its restarts), and across the masters Sentinel
//! designated every grant's token exceeds every grant acknowledged before it was requested.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::history::{self, Grant, History};
use common::sentinel::{Group, MASTER_NAME, Persistence};
use rand::{RngExt, SeedableRng, rngs::StdRng};
use redis::{Connection, ConnectionAddr, RedisResult};

const CLIENTS: usize = 8;
const LOCKS: usize = 4;
const RUN: Duration = Duration::from_secs(30);

#[test]
fn tokens_go_forward_through_sentinel_failovers_kills_and_pauses() {
    let history = Arc::new(History::new());
    let mut group = Group::start(&history);
    let first_master = group.servers[0].port;
    let running = Arc::new(AtomicBool::new(true));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (urls, history, running) = (
                group.sentinel_urls(),
                Arc::clone(&history),
                Arc::clone(&running),
            );
            thread::spawn(move || client(id, &urls, &history, &running))
        })
        .collect();

    let faults = nemesis(&mut group);
    running.store(false, Ordering::SeqCst);
    for client in clients {
        client.join().expect("client thread");
    }

    let grants = history.grants();
    let switches = group.switches();
    let own = history::regressions_per_server(&grants);
    let designated = history::by_designated_masters(&grants, first_master, &switches);
    let across = history::regressions(&designated);
    eprintln!(
        "sentinel run: {} grants ({} by designated masters), faults {faults:?}, {} failovers, \
         {} per-server regressions, {} regressions across designated masters",
        grants.len(),
        designated.len(),
        switches.len(),
        own.len(),
        across.len()
    );
    assert!(
        own.is_empty(),
        "a server went below its own tokens: {own:?}"
    );
    assert!(
        across.is_empty(),
        "a master went below an earlier grant: {across:?}"
    );
    assert!(
        switches.len() >= 3,
        "only {} failovers: {switches:?}",
        switches.len()
    );
    assert!(designated.len() >= 100, "only {} grants", designated.len());
}

/// What the nemesis does to the master.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `kill -9`, and back once the Sentinels failed it over.
    KillUntilFailover,
    /// `SIGSTOP`, and `SIGCONT` once the Sentinels failed it over.
    FreezeUntilFailover,
    /// `kill -9` and back at once, before the Sentinels notice: it stays master with whatever
    /// its persistence kept.
    CrashAndRestart,
}

/// Faults the master every few seconds until [`RUN`] is over: every other fault makes the
/// Sentinels fail it over; the others crash and restart a master with weak persistence more
/// often than one with AOF, since that is where tokens could go back. Returns the faults
/// done, each with the persistence of the master it hit.
fn nemesis(group: &mut Group) -> Vec<(Fault, Persistence)> {
    let mut rng = StdRng::seed_from_u64(9);
    let started = Instant::now();
    let mut faults = Vec::new();
    while started.elapsed() < RUN {
        thread::sleep(Duration::from_millis(rng.random_range(500..1_500)));
        let master = group.master();
        let weak = group.persistence[master] != Persistence::Aof;
        // Every other fault fails the master over; the rest favour a weak master's crash.
        let fault = match (faults.len() % 2, rng.random_range(0..4)) {
            (0, 0..2) | (1, 0) => Fault::KillUntilFailover,
            (0, _) | (1, 1) => Fault::FreezeUntilFailover,
            (1, 2) => Fault::CrashAndRestart,
            _ if weak => Fault::CrashAndRestart,
            _ => Fault::KillUntilFailover,
        };
        let lost_volume = rng.random_bool(0.5);
        faults.push((fault, group.persistence[master]));
        match fault {
            Fault::KillUntilFailover => {
                group.servers[master].kill();
                group.wait_for_failover(master, Duration::from_secs(20));
                group.restart(master, lost_volume);
            }
            Fault::FreezeUntilFailover => {
                group.servers[master].signal("STOP");
                group.wait_for_failover(master, Duration::from_secs(20));
                group.servers[master].signal("CONT");
            }
            Fault::CrashAndRestart => {
                group.servers[master].kill();
                group.restart(master, lost_volume);
            }
        }
        // Time for the Sentinels to settle (make an old master a replica) before the next.
        thread::sleep(Duration::from_secs(2));
    }
    faults
}

/// One client: finds the master through Sentinel, then acquires, sometimes renews, and
/// releases random locks, recording every grant; on any error it asks Sentinel again.
fn client(id: usize, sentinel_urls: &[String], history: &History, running: &AtomicBool) {
    let mut rng = StdRng::seed_from_u64(id as u64);
    let mut sentinel = redis::sentinel::Sentinel::build(sentinel_urls.to_vec()).expect("urls");
    let mut sequence = 0u64;
    while running.load(Ordering::SeqCst) {
        let Ok((mut con, server)) = connect_to_master(&mut sentinel) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        while running.load(Ordering::SeqCst) {
            sequence += 1;
            // A new owner per attempt: a retried acquire of the same holding would keep its
            // token and look like a regression.
            let owner = format!("client-{id}-{sequence}");
            let lock = format!("lock-{}", rng.random_range(0..LOCKS));
            let wait = rng.random_bool(0.5);
            if hold(&mut con, server, &lock, &owner, wait, history, &mut rng).is_err() {
                break;
            }
        }
    }
}

fn connect_to_master(sentinel: &mut redis::sentinel::Sentinel) -> RedisResult<(Connection, u16)> {
    let client = sentinel.master_for(MASTER_NAME, None)?;
    let ConnectionAddr::Tcp(_, port) = client.get_connection_info().addr().clone() else {
        unreachable!("the group listens on TCP");
    };
    let con = client.get_connection_with_timeout(Duration::from_secs(1))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))?;
    con.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok((con, port))
}

/// One acquire (with `WAIT` 300 ms or without), and if granted a renew half the time and a
/// release.
fn hold(
    con: &mut Connection,
    server: u16,
    lock: &str,
    owner: &str,
    wait: bool,
    history: &History,
    rng: &mut StdRng,
) -> RedisResult<()> {
    let mut acquire = redis::cmd("LOCK.ACQUIRE");
    acquire.arg(lock).arg(owner).arg(1_000);
    if wait {
        acquire.arg("WAIT").arg(300);
    }
    let requested_us = history.now_us();
    let token: Option<i64> = acquire.query(con)?;
    let Some(token) = token else {
        return Ok(());
    };
    history.record(Grant {
        lock: lock.to_owned(),
        token,
        server,
        requested_us,
        acknowledged_us: history.now_us(),
    });
    if rng.random_bool(0.5) {
        redis::cmd("LOCK.RENEW")
            .arg(lock)
            .arg(owner)
            .arg(1_000)
            .exec(con)?;
    }
    redis::cmd("LOCK.RELEASE").arg(lock).arg(owner).exec(con)
}
