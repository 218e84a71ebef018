//! A real Redis Cluster on loopback: three masters, each with the module, the slots spread by
//! `redis-cli --cluster create`.

use std::process::Command;

use super::{Server, call, free_port, wait_until};

/// `cluster-node-timeout` of most tests, in ms; Redis's default is 15 000.
pub const NODE_TIMEOUT_MS: u64 = 5_000;

/// A node with its bus on a free port of its own (the default, port + 10 000, may be taken by
/// another test's server, or lie past 65 535), whose module gets `module_args`, with
/// [`NODE_TIMEOUT_MS`]: to be made a replica of a master (`CLUSTER MEET`, then
/// `CLUSTER REPLICATE`).
pub fn node_with(module_args: &[&str]) -> Server {
    node_timed(Some(module_args), NODE_TIMEOUT_MS)
}

/// Like [`node_with`], with a `cluster-node-timeout` of `node_timeout_ms`; without the module
/// when `module_args` is `None`.
pub fn node_timed(module_args: Option<&[&str]>, node_timeout_ms: u64) -> Server {
    let bus = free_port().to_string();
    let timeout = node_timeout_ms.to_string();
    let args = [
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        &bus,
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &timeout,
    ];
    match module_args {
        Some(module_args) => Server::with_module_args(module_args, &args),
        None => Server::without_module(&args),
    }
}

/// Three masters with the slots spread by `redis-cli --cluster create`, ready (`cluster_state:ok`).
pub fn cluster() -> Vec<Server> {
    cluster_timed(NODE_TIMEOUT_MS, true)
}

/// Like [`cluster`], with a `cluster-node-timeout` of `node_timeout_ms`, with the module or
/// without it.
pub fn cluster_timed(node_timeout_ms: u64, module: bool) -> Vec<Server> {
    let nodes: Vec<Server> = (0..3)
        .map(|_| node_timed(module.then_some(&[][..]), node_timeout_ms))
        .collect();
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stdout)
    );
    for node in &nodes {
        let mut con = node.client();
        wait_until("cluster_state:ok", || {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .unwrap_or_default();
            info.contains("cluster_state:ok")
        });
    }
    nodes
}

/// `CLUSTER MYID` of `server`.
pub fn node_id(server: &Server) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut server.client())
        .expect("CLUSTER MYID")
}

/// True when `node` serves `key` (another node answers `-MOVED`).
pub fn serves(node: &Server, key: &str) -> bool {
    redis::cmd("LOCK.FENCE")
        .arg(key)
        .query::<Option<i64>>(&mut node.client())
        .is_ok()
}

/// `CONFIG GET cluster-replica-no-failover` on `server`: the module's word on whether the
/// cluster may fail over to it.
pub fn no_failover(server: &Server) -> String {
    let (_, value): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-replica-no-failover")
        .query(&mut server.client())
        .expect("CONFIG GET");
    value
}

/// A new node (`cluster-node-timeout` `node_timeout_ms`, with the module or without) made a
/// replica of `master` (`CLUSTER MEET`, `CLUSTER REPLICATE`), returned at once (see
/// [`wait_known`]).
pub fn add_replica(master: &Server, node_timeout_ms: u64, module: bool) -> Server {
    let replica = node_timed(module.then_some(&[][..]), node_timeout_ms);
    let mut con = replica.client();
    let port = master.port.to_string();
    let (_, bus): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-port")
        .query(&mut master.client())
        .expect("the master's bus port");
    call(&mut con, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
    let master_id = node_id(master);
    wait_until("the replica knows the master", || {
        knows(&mut con, &master_id)
    });
    call(&mut con, &["CLUSTER", "REPLICATE", &master_id]);
    replica
}

/// Waits until every one of `nodes` knows `replica` (the masters vote only for a replica they
/// know).
pub fn wait_known(nodes: &[Server], replica: &Server) {
    let replica_id = node_id(replica);
    wait_until("every node knows the replica", || {
        nodes
            .iter()
            .all(|node| knows(&mut node.client(), &replica_id))
    });
}

/// Whether the node `con` talks to knows the node `id` (`CLUSTER NODES`).
fn knows(con: &mut redis::Connection, id: &str) -> bool {
    redis::cmd("CLUSTER")
        .arg("NODES")
        .query::<String>(con)
        .is_ok_and(|known| known.contains(id))
}

/// Waits up to `within` for `replica` to be promoted and every node of `nodes` that answers to
/// see the cluster whole again (`cluster_state:ok`).
pub fn wait_for_takeover(nodes: &[Server], replica: &Server, within: std::time::Duration) {
    super::wait_within(
        within,
        "the replica is promoted and the cluster is ok",
        || {
            super::info_field(&mut replica.client(), "replication", "role").as_deref()
                == Some("master")
                && nodes.iter().chain([replica]).all(|node| {
                    node.try_client().is_err()
                        || redis::cmd("CLUSTER")
                            .arg("INFO")
                            .query::<String>(&mut node.client())
                            .is_ok_and(|info| info.contains("cluster_state:ok"))
                })
        },
    );
}
