//! Elections on real servers (`LOCK.CAMPAIGN`, `LOCK.LEADER`, `LOCK.PROCLAIM`, `LOCK.RESIGN`,
//! `LOCK.OBSERVE`):
//!
//! - A campaign leads with an epoch (a fencing token); another waits in FIFO order and leads
//!   at once when the first resigns, with a larger epoch; observers see the vacancy, then the
//!   new leader, in that order.
//! - `PROCLAIM` and `RESIGN` with a stale epoch are refused and change nothing; a proclaim
//!   reaches observers, replicas, the RDB, the AOF and `DUMP`/`RESTORE`.
//! - A leader killed with `kill -9`: the waiting candidate leads within the session's grace
//!   plus 100 ms, with a larger epoch, and a blocked observer sees the vacancy first.
//! - Observers on a replica, and after `DEL` and `FLUSHALL`; timeouts; bad input refused.

mod common;

use std::collections::HashMap;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{Server, call, error, info_field, queued, wait_until};
use redis::{Connection, Value};

/// The session grace of the crash test, in ms.
const GRACE_MS: u64 = 500;

/// Who leads, as `LOCK.LEADER` and `LOCK.OBSERVE` reply it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leadership {
    leader: Option<String>,
    epoch: i64,
    value: String,
    ttl: i64,
}

impl Leadership {
    /// `LAST epoch value`: what an observer passes next.
    fn last(&self) -> [String; 3] {
        ["LAST".into(), self.epoch.to_string(), self.value.clone()]
    }
}

fn leadership(reply: Value) -> Option<Leadership> {
    let fields: HashMap<String, Value> = match reply {
        Value::Nil => return None,
        other => redis::from_redis_value(other).expect("a map"),
    };
    let text = |name: &str| match fields.get(name) {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8(bytes.clone()).expect("utf-8")),
        Some(Value::Nil) => None,
        other => panic!("{name}: {other:?}"),
    };
    let number = |name: &str| match fields.get(name) {
        Some(Value::Int(n)) => *n,
        other => panic!("{name}: {other:?}"),
    };
    Some(Leadership {
        leader: text("leader"),
        epoch: number("epoch"),
        value: text("value").expect("a value"),
        ttl: number("ttl"),
    })
}

/// `LOCK.LEADER key`.
fn leader(con: &mut Connection, key: &str) -> Option<Leadership> {
    leadership(call(con, &["LOCK.LEADER", key]))
}

/// `LOCK.OBSERVE key args...`.
fn observe(con: &mut Connection, key: &str, args: &[&str]) -> Option<Leadership> {
    let mut command = vec!["LOCK.OBSERVE", key];
    command.extend_from_slice(args);
    leadership(call(con, &command))
}

/// `LOCK.CAMPAIGN key candidate value 30000 options...`: the epoch, or `None`.
fn campaign(
    con: &mut Connection,
    key: &str,
    candidate: &str,
    value: &str,
    options: &[&str],
) -> Option<i64> {
    redis::cmd("LOCK.CAMPAIGN")
        .arg(key)
        .arg(candidate)
        .arg(value)
        .arg(30_000)
        .arg(options)
        .query(con)
        .expect("LOCK.CAMPAIGN")
}

/// A candidate campaigning with `WAIT 0` on a connection of its own.
fn waiting_candidate(
    server: &Server,
    key: &str,
    candidate: &str,
    value: &str,
) -> JoinHandle<Option<i64>> {
    let mut con = server.client();
    let (key, candidate, value) = (key.to_owned(), candidate.to_owned(), value.to_owned());
    thread::spawn(move || campaign(&mut con, &key, &candidate, &value, &["WAIT", "0"]))
}

/// Observers blocked with `LAST` `seen`: each reports what it was told, with when, and
/// observes again from there until it has `count` states.
fn observer(
    server: &Server,
    key: &str,
    seen: &Leadership,
    count: usize,
) -> JoinHandle<Vec<(Instant, Leadership)>> {
    let mut con = server.client();
    let (key, mut seen) = (key.to_owned(), seen.clone());
    thread::spawn(move || {
        let mut told = Vec::new();
        while told.len() < count {
            let last = seen.last();
            let args = [last[0].as_str(), &last[1], &last[2], "BLOCK", "0"];
            seen = observe(&mut con, &key, &args).expect("a change");
            told.push((Instant::now(), seen.clone()));
        }
        told
    })
}

fn nobody() -> Leadership {
    Leadership {
        leader: None,
        epoch: 0,
        value: String::new(),
        ttl: -2,
    }
}

/// Waits until `count` clients are blocked in `LOCK.OBSERVE`.
fn observing(con: &mut Connection, count: u64) {
    let count = count.to_string();
    wait_until(&format!("{count} observers"), || {
        info_field(con, "lock", "lock_observers").as_deref() == Some(count.as_str())
    });
}

#[test]
fn a_resigned_leader_hands_over_at_once_and_observers_see_the_vacancy_first() {
    let server = Server::start(&[]);
    let mut con = server.client();
    assert_eq!(leader(&mut con, "cron"), None);
    assert_eq!(observe(&mut con, "cron", &[]), Some(nobody()));

    let first = campaign(&mut con, "cron", "alice", "10.0.0.1:80", &[]).expect("leads");
    let now = leader(&mut con, "cron").expect("a leader");
    assert_eq!(
        (now.leader.as_deref(), now.epoch, now.value.as_str()),
        (Some("alice"), first, "10.0.0.1:80")
    );
    assert!(now.ttl > 29_000 && now.ttl <= 30_000, "{now:?}");
    assert_eq!(
        campaign(&mut con, "cron", "bob", "10.0.0.2:80", &[]),
        None,
        "another leads"
    );
    assert_eq!(
        common::holder(&mut con, "cron").as_deref(),
        Some("alice"),
        "it is a lock"
    );

    let bob = waiting_candidate(&server, "cron", "bob", "10.0.0.2:80");
    queued(&mut con, "cron", 1);
    let watcher = observer(&server, "cron", &now, 2);
    observing(&mut con, 1);

    assert_eq!(
        call(&mut con, &["LOCK.RESIGN", "cron", &first.to_string()]),
        Value::Int(1)
    );
    let second = bob.join().expect("bob").expect("bob leads");
    assert!(second > first, "{second} after {first}");
    let told = watcher.join().expect("observer");
    let states: Vec<Leadership> = told.into_iter().map(|(_, state)| state).collect();
    assert_eq!(states[0], nobody(), "the vacancy first");
    assert_eq!(
        (
            states[1].leader.as_deref(),
            states[1].epoch,
            states[1].value.as_str()
        ),
        (Some("bob"), second, "10.0.0.2:80")
    );
    assert_eq!(
        info_field(&mut con, "lock", "lock_observers").as_deref(),
        Some("0")
    );

    // A campaign again by the leader keeps its epoch, with the new value.
    assert_eq!(
        campaign(&mut con, "cron", "bob", "10.0.0.3:80", &[]),
        Some(second)
    );
    assert_eq!(leader(&mut con, "cron").expect("bob").value, "10.0.0.3:80");
}

#[test]
fn a_stale_epoch_can_neither_proclaim_nor_resign() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let first = campaign(&mut con, "job", "alice", "a", &[]).expect("leads");
    assert_eq!(
        call(&mut con, &["LOCK.RESIGN", "job", &first.to_string()]),
        Value::Int(1)
    );
    let second = campaign(&mut con, "job", "bob", "b", &[]).expect("leads");
    let before = leader(&mut con, "job").expect("bob");

    let stale = first.to_string();
    assert_eq!(
        call(&mut con, &["LOCK.PROCLAIM", "job", &stale, "mine"]),
        Value::Int(0)
    );
    assert_eq!(
        call(&mut con, &["LOCK.RESIGN", "job", &stale]),
        Value::Int(0)
    );
    assert_eq!(
        call(&mut con, &["LOCK.PROCLAIM", "nothing", "1", "x"]),
        Value::Int(0)
    );
    let after = leader(&mut con, "job").expect("bob still");
    assert_eq!(
        (after.leader, after.epoch, after.value),
        (before.leader, second, before.value)
    );

    let current = second.to_string();
    let watcher = observer(&server, "job", &leader(&mut con, "job").expect("bob"), 1);
    observing(&mut con, 1);
    assert_eq!(
        call(
            &mut con,
            &["LOCK.PROCLAIM", "job", &current, "b2", "NOSYNC"]
        ),
        Value::Int(1)
    );
    let told = watcher.join().expect("observer");
    assert_eq!((told[0].1.epoch, told[0].1.value.as_str()), (second, "b2"));
    let now = leader(&mut con, "job").expect("bob");
    assert_eq!((now.epoch, now.value.as_str()), (second, "b2"));
    assert!(now.ttl > 29_000, "a proclaim keeps the lease: {now:?}");
}

#[test]
fn a_leader_killed_with_kill_9_is_replaced_within_the_grace_plus_100_ms() {
    let server = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&server);
    let mut con = server.client();
    let command = "LOCK.CAMPAIGN leader crashed 10.0.0.1 30000";
    let (mut crashed, first) = common::session_process(server.port, GRACE_MS, command);
    let seen = leader(&mut con, "leader").expect("the crashed one leads");
    assert_eq!(seen.epoch, first);
    let next = waiting_candidate(&server, "leader", "next", "10.0.0.2");
    queued(&mut con, "leader", 1);
    let on_master = observer(&server, "leader", &seen, 2);
    common::sync_replicas(&mut con);
    let on_replica = observer(&replica, "leader", &seen, 2);
    observing(&mut con, 1);
    observing(&mut replica.client(), 1);

    let killed = Instant::now();
    crashed.kill().expect("kill -9");
    crashed.wait().expect("reaped");
    let second = next.join().expect("next").expect("leads");
    let elapsed = killed.elapsed();
    assert!(second > first, "{second} after {first}");
    assert!(
        elapsed >= Duration::from_millis(GRACE_MS - 20)
            && elapsed <= Duration::from_millis(GRACE_MS + 100),
        "led {elapsed:?} after the kill, grace {GRACE_MS} ms"
    );
    for watcher in [on_master, on_replica] {
        let told = watcher.join().expect("observer");
        assert_eq!(told[0].1, nobody(), "the vacancy first");
        assert_eq!(
            (told[1].1.leader.as_deref(), told[1].1.epoch),
            (Some("next"), second)
        );
        assert!(told[0].0 <= told[1].0);
    }
}

#[test]
fn a_proclaimed_value_survives_replication_restarts_the_aof_and_restore() {
    let mut server = Server::start(&["--appendonly", "yes"]);
    let replica = Server::start(&[]);
    replica.replicate(&server);
    let mut con = server.client();
    let epoch = campaign(&mut con, "svc", "alice", "first", &[]).expect("leads");
    let value = "v".repeat(65_536);
    let current = epoch.to_string();
    assert_eq!(
        call(&mut con, &["LOCK.PROCLAIM", "svc", &current, &value]),
        Value::Int(1)
    );
    let expected = (Some("alice".to_owned()), epoch, value.clone());
    let seen = |con: &mut Connection| {
        let now = leader(con, "svc").expect("a leader");
        (now.leader, now.epoch, now.value)
    };

    common::sync_replicas(&mut con);
    assert_eq!(seen(&mut replica.client()), expected, "the replica");
    call(&mut con, &["BGREWRITEAOF"]);
    wait_until("the AOF rewrite ends", || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    server.kill();
    server.restart();
    let mut con = server.client();
    assert_eq!(seen(&mut con), expected, "the AOF");
    server.shutdown("SAVE");
    server.restart_with(&["--appendonly", "no"]);
    let mut con = server.client();
    assert_eq!(seen(&mut con), expected, "the RDB");

    let payload = common::dump(&mut con, "svc");
    common::restore(&mut con, "copy", 0, &payload).expect("RESTORE");
    let copy = leader(&mut con, "copy").expect("restored");
    assert_eq!((copy.epoch, copy.value), (epoch, value));
}

#[test]
fn observers_learn_of_a_deleted_or_flushed_election_and_time_out_with_null() {
    let server = Server::start(&[]);
    let mut con = server.client();
    campaign(&mut con, "a", "alice", "x", &[]).expect("leads");
    campaign(&mut con, "b", "bob", "y", &[]).expect("leads");
    let a = leader(&mut con, "a").expect("alice");
    let b = leader(&mut con, "b").expect("bob");

    let last = a.last();
    let timed = Instant::now();
    let args = [last[0].as_str(), &last[1], &last[2], "BLOCK", "200"];
    assert_eq!(
        call(
            &mut con,
            &[
                "LOCK.OBSERVE",
                "a",
                args[0],
                args[1],
                args[2],
                args[3],
                args[4]
            ]
        ),
        Value::Nil
    );
    assert!(timed.elapsed() >= Duration::from_millis(190));
    assert_eq!(
        observe(&mut con, "a", &[args[0], args[1], args[2]]),
        None,
        "no BLOCK: null at once"
    );

    let on_a = observer(&server, "a", &a, 1);
    let on_b = observer(&server, "b", &b, 1);
    observing(&mut con, 2);
    call(&mut con, &["DEL", "a"]);
    assert_eq!(on_a.join().expect("observer")[0].1, nobody());
    call(&mut con, &["FLUSHALL"]);
    assert_eq!(on_b.join().expect("observer")[0].1, nobody());
    assert_eq!(
        info_field(&mut con, "lock", "lock_observers").as_deref(),
        Some("0")
    );

    // A lock held shared has no leader.
    common::acquire(&mut con, "shared", "r1", 30_000, &["SHARED"]).expect("held");
    assert_eq!(leader(&mut con, "shared"), None);
}

#[test]
fn observers_learn_of_a_resignation_nobody_waited_for_and_of_a_lease_that_ran_out() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let epoch = campaign(&mut con, "alone", "alice", "x", &[]).expect("leads");
    let watcher = observer(
        &server,
        "alone",
        &leader(&mut con, "alone").expect("alice"),
        1,
    );
    observing(&mut con, 1);
    // The release deletes the key; the observer is told while it is gone.
    assert_eq!(
        call(&mut con, &["LOCK.RESIGN", "alone", &epoch.to_string()]),
        Value::Int(1)
    );
    assert_eq!(watcher.join().expect("observer")[0].1, nobody());

    let short = call(&mut con, &["LOCK.CAMPAIGN", "short", "bob", "y", "300"]);
    assert!(matches!(short, Value::Int(_)), "{short:?}");
    let watcher = observer(
        &server,
        "short",
        &leader(&mut con, "short").expect("bob"),
        1,
    );
    assert_eq!(
        watcher.join().expect("observer")[0].1,
        nobody(),
        "the lease ran out"
    );
    assert_eq!(
        call(&mut con, &["PING"]),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let epoch = campaign(&mut con, "e", "alice", "x", &[]).expect("leads");
    let held =
        |con: &mut Connection| leader(con, "e").map(|now| (now.leader, now.epoch, now.value));
    let before = held(&mut con);
    let long = "v".repeat(65_537);
    let e = epoch.to_string();
    for (args, expected) in [
        (
            vec!["LOCK.CAMPAIGN", "e", "bob", "x"],
            "wrong number of arguments",
        ),
        (
            vec!["LOCK.CAMPAIGN", "f", "bob", &long, "1000"],
            "value must be at most 65536 bytes",
        ),
        (
            vec!["LOCK.CAMPAIGN", "f", "bob", "x", "1000", "SHARED"],
            "syntax error",
        ),
        (
            vec!["LOCK.CAMPAIGN", "f", "bob", "x", "1000", "REENTRANT"],
            "syntax error",
        ),
        (
            vec!["LOCK.CAMPAIGN", "f", "", "x", "1000"],
            "owner must be 1 to 256 bytes",
        ),
        (
            vec!["LOCK.CAMPAIGN", "f", "bob", "x", "soon"],
            "not an integer",
        ),
        (vec!["LOCK.PROCLAIM", "e", "one", "x"], "not an integer"),
        (vec!["LOCK.PROCLAIM", "e", "-1", "x"], "not an integer"),
        (
            vec!["LOCK.PROCLAIM", "e", &e, &long],
            "value must be at most 65536 bytes",
        ),
        (vec!["LOCK.PROCLAIM", "e", &e], "wrong number of arguments"),
        (vec!["LOCK.PROCLAIM", "e", &e, "x", "LATER"], "syntax error"),
        (vec!["LOCK.RESIGN", "e"], "wrong number of arguments"),
        (vec!["LOCK.RESIGN", "e", "x"], "not an integer"),
        (vec!["LOCK.LEADER"], "wrong number of arguments"),
        (vec!["LOCK.OBSERVE", "e", "LAST", "1"], "syntax error"),
        (
            vec!["LOCK.OBSERVE", "e", "LAST", "x", "v"],
            "not an integer",
        ),
        (
            vec!["LOCK.OBSERVE", "e", "BLOCK", "-1"],
            "timeout is negative",
        ),
        (
            vec!["LOCK.OBSERVE", "e", "BLOCK", "1", "BLOCK", "1"],
            "syntax error",
        ),
    ] {
        let got = error(&mut con, &args);
        assert!(got.contains(expected), "{args:?}: {got}");
    }
    call(&mut con, &["SET", "plain", "1"]);
    for args in [
        vec!["LOCK.CAMPAIGN", "plain", "bob", "x", "1000"],
        vec!["LOCK.LEADER", "plain"],
        vec!["LOCK.PROCLAIM", "plain", "1", "x"],
        vec!["LOCK.RESIGN", "plain", "1"],
        vec!["LOCK.OBSERVE", "plain"],
    ] {
        assert!(error(&mut con, &args).starts_with("WRONGTYPE"), "{args:?}");
    }
    assert_eq!(held(&mut con), before);
    assert_eq!(call(&mut con, &["EXISTS", "f"]), Value::Int(0));
}
