//! A real 3-master Redis Cluster on loopback, each node with the module: a cluster-aware
//! client takes, renews, fences and releases locks on keys spread over all masters, and
//! resharding a slot that holds a held lock keeps the holder, token and lease; a replica is
//! never failed over to before it is in its master's in-sync set, and every lock synced to the
//! set is held on the replica a Cluster failover promotes.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::cluster::{
    NODE_TIMEOUT_MS, add_replica, cluster, no_failover, node_id, serves, wait_for_takeover,
    wait_known,
};
use common::{
    Server, acquire, acquire_counted, assert_same_holding, call, error, info_field, lock_info,
    shared_info, wait_until,
};
use redis::Value;
use redis::cluster::ClusterClient;

fn slot_of(server: &Server, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut server.client())
        .expect("KEYSLOT")
}

fn client(nodes: &[Server]) -> redis::cluster::ClusterConnection {
    ClusterClient::new(nodes.iter().map(Server::url).collect::<Vec<_>>())
        .and_then(|client| client.get_connection())
        .expect("cluster connection")
}

/// The steps of `redis-cli --cluster reshard` for the one slot of `key`.
fn reshard(nodes: &[Server], source: &Server, target: &Server, slot: &str, keys: &[&str]) {
    let (source_id, target_id) = (node_id(source), node_id(target));
    call(
        &mut target.client(),
        &["CLUSTER", "SETSLOT", slot, "IMPORTING", &source_id],
    );
    call(
        &mut source.client(),
        &["CLUSTER", "SETSLOT", slot, "MIGRATING", &target_id],
    );
    let target_port = target.port.to_string();
    for key in keys {
        let migrated = call(
            &mut source.client(),
            &["MIGRATE", "127.0.0.1", &target_port, key, "0", "5000"],
        );
        assert_eq!(migrated, Value::Okay);
    }
    for node in nodes {
        call(
            &mut node.client(),
            &["CLUSTER", "SETSLOT", slot, "NODE", &target_id],
        );
    }
}

/// The node holding the slot's keys now, and another one.
fn holder_and_other<'a>(nodes: &'a [Server], slot: &str) -> (&'a Server, &'a Server) {
    let keys_in_slot =
        |node: &Server| call(&mut node.client(), &["CLUSTER", "COUNTKEYSINSLOT", slot]);
    let source = nodes
        .iter()
        .find(|node| keys_in_slot(node) != Value::Int(0))
        .expect("the node holding the lock");
    let target = nodes
        .iter()
        .find(|node| node.port != source.port)
        .expect("another node");
    (source, target)
}

#[test]
fn locks_on_every_master_through_a_cluster_client() {
    let nodes = cluster();
    let mut con = client(&nodes);
    let keys: Vec<String> = (0..30).map(|i| format!("order:{i}")).collect();
    for key in &keys {
        let token = acquire(&mut con, key, "me", 60_000, &[]);
        let token = token.expect("free");
        let renewed: i64 = redis::cmd("LOCK.RENEW")
            .arg(key)
            .arg("me")
            .arg(90_000)
            .query(&mut con)
            .expect("renew");
        let fenced: Option<i64> = redis::cmd("LOCK.FENCE")
            .arg(key)
            .arg("me")
            .query(&mut con)
            .expect("fence");
        assert_eq!((renewed, fenced), (1, Some(token)), "{key}");
    }
    let holding: HashSet<u16> = nodes
        .iter()
        .filter(|node| call(&mut node.client(), &["DBSIZE"]) != Value::Int(0))
        .map(|node| node.port)
        .collect();
    assert_eq!(
        holding.len(),
        3,
        "the locks are spread over all three masters"
    );
    for key in &keys {
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg("me")
            .query(&mut con)
            .expect("release");
        assert_eq!(released, 1, "{key}");
    }
    for node in &nodes {
        assert_eq!(call(&mut node.client(), &["DBSIZE"]), Value::Int(0));
    }
}

#[test]
fn resharding_a_slot_keeps_a_held_lock() {
    let nodes = cluster();
    let mut con = client(&nodes);
    let key = "payment:{resharded}";
    let token = acquire(&mut con, key, "holder", 120_000, &["REENTRANT"]);
    let token = token.expect("free");
    let again = acquire(&mut con, key, "holder", 120_000, &["REENTRANT"]);
    assert_eq!(again, Some(token));
    let slot = slot_of(&nodes[0], key).to_string();
    let (source, target) = holder_and_other(&nodes, &slot);
    let keys_in_slot =
        |node: &Server| call(&mut node.client(), &["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    let before = lock_info(&mut source.client(), key).expect("held");
    assert_eq!(before.3, 2, "two holds");

    reshard(&nodes, source, target, &slot, &[key]);

    let after = lock_info(&mut target.client(), key).expect("held on the new master");
    assert_same_holding(&before, &after, 10_000);
    assert_eq!(
        keys_in_slot(source),
        Value::Int(0),
        "moved away from the old master"
    );

    // The cluster client follows -MOVED to the new master.
    let fenced: Option<i64> = redis::cmd("LOCK.FENCE")
        .arg(key)
        .query(&mut con)
        .expect("fence");
    assert_eq!(fenced, Some(token));
    for _ in 0..2 {
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg("holder")
            .query(&mut con)
            .expect("release");
        assert_eq!(released, 1);
    }
    let next = acquire(&mut con, key, "next", 1_000, &[]);
    assert!(
        next.expect("free") > token,
        "the new master issues larger tokens for this lock"
    );
}

#[test]
fn resharding_a_slot_keeps_every_shared_holder() {
    let nodes = cluster();
    let mut con = client(&nodes);
    let key = "stock:{resharded}";
    let permit = ["SHARED", "LIMIT", "5"];
    let tokens: Vec<i64> = ["a", "b", "c"]
        .into_iter()
        .map(|owner| acquire(&mut con, key, owner, 120_000, &permit).expect("a permit"))
        .collect();
    let slot = slot_of(&nodes[0], key).to_string();
    let (source, target) = holder_and_other(&nodes, &slot);
    let before = shared_info(&mut source.client(), key).expect("held");
    reshard(&nodes, source, target, &slot, &[key]);
    let after = shared_info(&mut target.client(), key).expect("held on the new master");
    let holdings = |info: &common::SharedInfo| {
        let owners = info.owners.iter().map(|o| (o.0.clone(), o.1, o.3));
        (info.limit, owners.collect::<Vec<_>>())
    };
    assert_eq!(holdings(&after), holdings(&before));
    for (was, is) in before.owners.iter().zip(&after.owners) {
        assert!(is.2 <= was.2 && is.2 > was.2 - 10_000, "each lease kept");
    }
    let next = acquire(&mut con, key, "d", 1_000, &permit).expect("a fourth permit");
    assert!(next > tokens[2], "the new master issues larger tokens");
}

#[test]
fn a_waiter_whose_slot_moves_away_is_told_to_try_again() {
    let nodes = cluster();
    let mut con = client(&nodes);
    let key = "job:{moving}";
    let token = acquire(&mut con, key, "holder", 120_000, &[]);
    let token = token.expect("free");
    let slot = slot_of(&nodes[0], key).to_string();
    let (source, target) = holder_and_other(&nodes, &slot);

    // Blocked on the source node itself, as a client is between redirects.
    let mut waiter = source.client();
    let waiting = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg("waiter")
            .arg(60_000)
            .arg("WAIT")
            .arg(0)
            .query::<Option<i64>>(&mut waiter)
    });
    wait_until("one waiter", || {
        lock_info(&mut source.client(), key).is_some_and(|info| info.4 == 1)
    });
    reshard(&nodes, source, target, &slot, &[key]);

    let refused = waiting
        .join()
        .expect("waiter thread")
        .expect_err("turned away");
    assert_eq!(refused.code(), Some("TRYAGAIN"), "{refused}");
    let keys_in_slot =
        |node: &Server| call(&mut node.client(), &["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    assert_eq!(
        keys_in_slot(source),
        Value::Int(0),
        "no stray lock on the old master"
    );
    let moved = lock_info(&mut target.client(), key).expect("held on the new master");
    assert_eq!(
        (moved.0.as_str(), moved.1),
        ("holder", token),
        "still the one holder"
    );
}

#[test]
fn a_set_in_one_slot_moves_whole_and_keys_in_two_slots_are_refused() {
    let nodes = cluster();
    let mut con = client(&nodes);
    let keys = ["{order:42}:payment", "{order:42}:stock"];
    let tokens: Vec<i64> = redis::cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg(&keys)
        .arg("holder")
        .arg(120_000)
        .query(&mut con)
        .expect("one slot, both free");
    let crossed = redis::cmd("LOCK.MACQUIRE")
        .arg(2)
        .arg(&["order:42", "order:43"])
        .arg("holder")
        .arg(1_000)
        .query::<Value>(&mut nodes[0].client())
        .expect_err("two slots");
    assert_eq!(crossed.code(), Some("CROSSSLOT"), "{crossed}");

    let slot = slot_of(&nodes[0], keys[0]).to_string();
    let (source, target) = holder_and_other(&nodes, &slot);
    // A set waiting on the source node is turned away when the slot moves.
    let mut waiter = source.client();
    let waiting = std::thread::spawn(move || {
        redis::cmd("LOCK.MACQUIRE")
            .arg(2)
            .arg(&keys)
            .arg("waiter")
            .arg(60_000)
            .arg("WAIT")
            .arg(0)
            .query::<Option<Vec<i64>>>(&mut waiter)
    });
    wait_until("the set waits", || {
        lock_info(&mut source.client(), keys[0]).is_some_and(|info| info.4 == 1)
    });
    reshard(&nodes, source, target, &slot, &keys);
    let refused = waiting
        .join()
        .expect("waiter thread")
        .expect_err("turned away");
    assert_eq!(refused.code(), Some("TRYAGAIN"), "{refused}");
    for (key, token) in keys.iter().zip(&tokens) {
        let moved = lock_info(&mut target.client(), key).expect("held on the new master");
        assert_eq!(
            (moved.0.as_str(), moved.1, moved.4),
            ("holder", *token, 0),
            "{key}"
        );
    }
    let released: i64 = redis::cmd("LOCK.MRELEASE")
        .arg(2)
        .arg(&keys)
        .arg("holder")
        .query(&mut con)
        .expect("the cluster client follows the slot");
    assert_eq!(released, 2);
}

#[test]
fn a_master_taking_a_slot_issues_tokens_above_the_slots_last_master() {
    let nodes = cluster();
    let key = "invoice:{taken-over}";
    let slot = slot_of(&nodes[0], key).to_string();
    let source = nodes.iter().find(|n| serves(n, key)).expect("its master");
    let target = nodes
        .iter()
        .find(|n| n.port != source.port)
        .expect("another");
    let elsewhere = (0..)
        .map(|i| format!("elsewhere:{i}"))
        .find(|other| serves(target, other))
        .expect("a key of the target");
    // The target's first token comes first, so the source's first token lands above it.
    let target_token = acquire(&mut target.client(), &elsewhere, "t", 1_000, &[]);
    std::thread::sleep(Duration::from_millis(20));
    let mut source_con = source.client();
    let source_token = acquire(&mut source_con, key, "first", 1_000, &[]).expect("free");
    assert!(source_token > target_token.expect("free"));
    call(&mut source_con, &["LOCK.RELEASE", key, "first"]);

    reshard(&nodes, source, target, &slot, &[]);

    let next = acquire(&mut target.client(), key, "next", 1_000, &[]).expect("free");
    assert!(
        next > source_token,
        "the lock's new master went back: {next} after {source_token}"
    );
}

#[test]
fn a_cluster_fails_over_only_to_an_in_sync_replica_which_holds_every_synced_lock() {
    let mut nodes = cluster();
    let mut replica = add_replica(&nodes[0], NODE_TIMEOUT_MS, true);
    let master = &nodes[0];
    assert_eq!(
        no_failover(&replica),
        "yes",
        "a new replica is not in the set yet"
    );
    let forced = error(&mut replica.client(), &["CLUSTER", "FAILOVER", "FORCE"]);
    assert!(
        forced.contains("CLUSTER FAILOVER FORCE refused by the lock module"),
        "{forced}"
    );
    // The module learns the timing from cluster-node-timeout (at its next look, within 200 ms):
    // a lease of twice it and 6 s.
    wait_until("the node timeout learned", || {
        info_field(&mut replica.client(), "lock", "lock_insync_lease_ms").as_deref()
            == Some("16000")
    });
    wait_known(&nodes, &replica);
    wait_until("the replica joins the set", || {
        info_field(&mut master.client(), "lock", "lock_insync_replicas").as_deref() == Some("1")
    });
    wait_until("the replica may be failed over to", || {
        no_failover(&replica) == "no"
    });

    // Ten locks on the master, each counted as the clients count it: the in-sync set has it.
    let mut mine = master.client();
    let keys: Vec<String> = (0..)
        .map(|n| format!("order:{n}"))
        .filter(|key| serves(master, key))
        .take(10)
        .collect();
    for key in &keys {
        acquire_counted(&mut mine, key, "holder", 60_000);
    }
    drop(mine);

    nodes[0].kill();
    wait_for_takeover(&nodes[1..], &replica, Duration::from_secs(60));
    let mut promoted = replica.client();
    for key in &keys {
        let holder = common::holder(&mut promoted, key);
        assert_eq!(holder.as_deref(), Some("holder"), "{key} on the new master");
    }
    replica.kill();
}

/// Loading the module into a running Redis Cluster shard, replicas first
/// (docs/operations/upgrading.md): the shard's replica, restarted with the module under a master
/// without it, keeps `cluster-replica-no-failover no` (nothing to protect) and takes over with a
/// plain `CLUSTER FAILOVER`; the old master, restarted with the module as its replica, says it
/// runs it, joins the set, and takes over in turn when the new master dies.
#[test]
fn a_shard_loading_the_module_replica_first_keeps_failing_over() {
    let mut nodes = common::cluster::cluster_timed(NODE_TIMEOUT_MS, false);
    let mut replica = add_replica(&nodes[0], NODE_TIMEOUT_MS, false);
    wait_known(&nodes, &replica);
    let module = common::module_path().to_string_lossy().into_owned();
    let with_module = ["--loadmodule", module.as_str()];

    replica.shutdown("NOSAVE");
    replica.restart_with(&with_module);
    let mut r = replica.client();
    wait_until("the replica finds its master without the module", || {
        info_field(&mut r, "lock", "lock_insync_promotable_by").as_deref()
            == Some("master-without-module")
    });
    assert_eq!(no_failover(&replica), "no", "it may be failed over to");
    call(&mut r, &["CLUSTER", "FAILOVER"]);
    wait_for_takeover(&nodes[1..], &replica, Duration::from_secs(60));

    let old = &mut nodes[0];
    old.shutdown("NOSAVE");
    old.restart_with(&with_module);
    let mut o = old.client();
    wait_until("the old master is a replica again", || {
        info_field(&mut o, "replication", "master_link_status").as_deref() == Some("up")
    });
    wait_until("it joins the new master's set", || {
        info_field(&mut r, "lock", "lock_insync_replicas").as_deref() == Some("1")
    });
    wait_until("it may be failed over to", || no_failover(old) == "no");
    let key = (0..)
        .map(|n| format!("job:{n}"))
        .find(|key| serves(&replica, key))
        .expect("a key of the shard");
    acquire_counted(&mut r, &key, "holder", 60_000);
}

#[test]
fn a_guarded_command_goes_to_the_node_of_its_keys_and_keys_in_two_slots_are_refused() {
    let nodes = cluster();
    let mut con = client(&nodes);
    let (lock, stock) = ("{order:7}:lock", "{order:7}:stock");
    call_cluster(&mut con, &["SET", stock, "5"]);
    let token = redis::cmd("LOCK.ACQUIRE")
        .arg(&[lock, "holder", "60000"][..])
        .query::<i64>(&mut con)
        .expect("granted");
    let guarded = ["LOCK.GUARD", lock, "holder", "DECRBY", stock, "1"];
    assert_eq!(call_cluster(&mut con, &guarded), Value::Int(4));
    let fenced = [
        "LOCK.FENCED",
        "{order:7}:fence",
        &token.to_string(),
        "SET",
        stock,
        "9",
    ];
    assert_eq!(call_cluster(&mut con, &fenced), Value::Okay);
    let other = nodes
        .iter()
        .find(|node| !serves(node, lock))
        .expect("a node without the slot");
    let moved = error(&mut other.client(), &guarded);
    assert!(moved.starts_with("MOVED"), "{moved}");
    let owner = nodes
        .iter()
        .find(|node| serves(node, lock))
        .expect("the slot's node");
    for crossed in [
        vec!["LOCK.GUARD", lock, "holder", "SET", "elsewhere", "1"],
        vec!["LOCK.FENCED", "fence", "5", "SET", stock, "1"],
    ] {
        let refused = error(&mut owner.client(), &crossed);
        assert!(refused.starts_with("CROSSSLOT"), "{crossed:?}: {refused}");
    }
    assert_eq!(
        call(&mut owner.client(), &["GET", stock]),
        Value::BulkString(b"9".to_vec())
    );
}

/// Runs a command through the cluster client, which routes it by its first key.
fn call_cluster(con: &mut redis::cluster::ClusterConnection, args: &[&str]) -> Value {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(con)
        .expect("through the cluster client")
}
