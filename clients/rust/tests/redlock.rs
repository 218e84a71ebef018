//! Redlock on five real, independent servers with the module: a majority is enough and a
//! minority fails closed, a node that restarts with nothing or runs ahead cannot make tokens go
//! backwards, and a randomized run with nodes frozen, killed and cut off keeps every lock's
//! tokens increasing at a fenced store.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::history::{self, FencedStore, Grant, History};
use common::proxy::LinkProxy;
use common::{Server, call};
use leasehold_client::{Client, Redlock};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::Value;

const TTL: Duration = Duration::from_secs(2);

fn servers() -> Vec<Server> {
    (0..5).map(|_| Server::start(&[])).collect()
}

async fn connect(ports: &[u16]) -> Redlock {
    let mut clients = Vec::new();
    for port in ports {
        clients.push(
            Client::open(&format!("redis://127.0.0.1:{port}"))
                .await
                .expect("connect"),
        );
    }
    Redlock::new(clients).expect("five nodes")
}

fn ports(servers: &[Server]) -> Vec<u16> {
    servers.iter().map(|server| server.port).collect()
}

/// How many nodes hold `key` now, for `owner` if given (`LOCK.FENCE key [owner]`).
fn holding(servers: &[Server], key: &str, owner: Option<&str>) -> usize {
    let fence = [&["LOCK.FENCE", key][..], owner.as_slice()].concat();
    servers
        .iter()
        .filter(|server| call(&mut server.client(), &fence) != Value::Nil)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_majority_is_enough_and_a_minority_fails_closed() {
    let servers = servers();
    let redlock = connect(&ports(&servers)).await;
    assert!(
        Redlock::new(Vec::new()).is_err(),
        "needs an odd number of at least 3"
    );
    let first = redlock.lock("k");
    let guard = first
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("all five up");
    assert_eq!(holding(&servers, "k", Some(guard.owner())), 5);
    let t1 = guard.token();
    for server in &servers {
        let fenced = call(&mut server.client(), &["LOCK.FENCE", "k"]);
        assert_eq!(
            fenced,
            Value::Int(i64::try_from(t1).expect("token")),
            "raised everywhere"
        );
    }
    assert!(guard.release().await.expect("release"));

    servers[0].signal("STOP");
    servers[1].signal("STOP");
    let second = redlock.lock("k");
    let guard = second
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("three of five");
    assert!(guard.token() > t1);
    assert!(guard.renew(TTL).await.expect("renew"), "a majority renews");
    assert!(guard.release().await.expect("release"));

    servers[2].signal("STOP");
    let third = redlock.lock("k");
    assert!(
        third.try_acquire(TTL).await.expect("acquire").is_none(),
        "two of five"
    );
    assert_eq!(
        holding(&servers[3..], "k", None),
        0,
        "released where it was granted"
    );
    for server in &servers[..3] {
        server.signal("CONT");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_restarts_with_nothing_or_runs_ahead_cannot_take_tokens_back() {
    let mut servers = servers();
    let redlock = connect(&ports(&servers)).await;
    let before = redlock
        .lock("k")
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("up");
    let t0 = before.token();
    before.release().await.expect("release");

    // Node 0 restarts without persistence a while later: its counter starts from its clock
    // floor plus the reserve, ahead of the others, which kept counting from where they were.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    servers[0].restart_empty();
    let redlock = connect(&ports(&servers)).await; // fresh connections to the restarted node
    let ahead = redlock
        .lock("k")
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("up");
    let t1 = ahead.token();
    assert!(t1 > t0);
    let from_node_0 = call(&mut servers[0].client(), &["LOCK.FENCE", "k"]);
    assert_eq!(
        from_node_0,
        Value::Int(i64::try_from(t1).expect("token")),
        "node 0 gave the max"
    );
    ahead.release().await.expect("release");

    // Later holders whose quorum misses node 0: the others were raised to t1 while it was held.
    servers[0].signal("STOP");
    servers[1].signal("STOP");
    let missing_it = redlock
        .lock("k")
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("3 of 5");
    assert!(missing_it.token() > t1, "{} after {t1}", missing_it.token());
    servers[0].signal("CONT");
    servers[1].signal("CONT");
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_keep_increasing_while_nodes_are_frozen_killed_and_cut_off() {
    let mut servers = servers();
    let mut proxies: Vec<LinkProxy> = servers.iter().map(|s| LinkProxy::to(s.port)).collect();
    let proxy_ports: Vec<u16> = proxies.iter().map(|p| p.port).collect();
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::default());
    let running = Arc::new(AtomicBool::new(true));
    let mut clients = Vec::new();
    for id in 0..6_u64 {
        let redlock = connect(&proxy_ports).await;
        let (history, store, running) = (
            Arc::clone(&history),
            Arc::clone(&store),
            Arc::clone(&running),
        );
        clients.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(id);
            while running.load(Ordering::Relaxed) {
                let name = format!("lock-{}", rng.random_range(0..2));
                let requested_us = history.now_us();
                let Ok(Some(guard)) = redlock
                    .lock(&name)
                    .try_acquire(Duration::from_millis(800))
                    .await
                else {
                    tokio::time::sleep(Duration::from_millis(rng.random_range(1..20))).await;
                    continue;
                };
                let token = i64::try_from(guard.token()).unwrap_or(i64::MAX);
                history.record(Grant {
                    lock: name.clone(),
                    token,
                    server: 0,
                    requested_us,
                    acknowledged_us: history.now_us(),
                    ..Grant::default()
                });
                store.write(&name, token);
                tokio::time::sleep(Duration::from_millis(rng.random_range(1..30))).await;
                let _ = guard.release().await;
            }
        }));
    }
    let mut rng = StdRng::seed_from_u64(99);
    let mut faults: HashMap<&str, usize> = HashMap::new();
    for round in 0..12 {
        let node = rng.random_range(0..servers.len());
        let down = Duration::from_millis(rng.random_range(200..700));
        match round % 3 {
            0 => {
                servers[node].signal("STOP");
                tokio::time::sleep(down).await;
                servers[node].signal("CONT");
                *faults.entry("freeze").or_default() += 1;
            }
            1 => {
                servers[node].kill();
                tokio::time::sleep(down).await;
                servers[node].restart_empty();
                *faults.entry("kill and restart empty").or_default() += 1;
            }
            _ => {
                proxies[node].cut();
                tokio::time::sleep(down).await;
                proxies[node] = LinkProxy::at(proxy_ports[node], servers[node].port);
                *faults.entry("cut link").or_default() += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
    }
    running.store(false, Ordering::Relaxed);
    for client in clients {
        client.await.expect("client task");
    }
    let grants = history.grants();
    let regressions = history::regressions_per_lock(&grants).len();
    let (accepted, rejected, _) = store.summary();
    eprintln!(
        "redlock run: {} grants, faults {faults:?}, {accepted} writes accepted, {rejected} stale writes rejected, {regressions} token regressions",
        grants.len(),
    );
    assert_eq!(regressions, 0);
    assert!(grants.len() >= 50, "only {} grants", grants.len());
}
