//! A real Redis Cluster on loopback: three masters, each with the module, the slots spread by
//! `redis-cli --cluster create`.

use std::process::Command;

use super::{Server, free_port, wait_until};

/// A node with its bus on a free port of its own: the default, port + 10 000, may be taken by
/// another test's server, or lie past 65 535.
fn node() -> Server {
    node_with(&[])
}

/// A node like [`node`] whose module gets `module_args`, to be made a replica of a master
/// (`CLUSTER MEET`, then `CLUSTER REPLICATE`).
pub fn node_with(module_args: &[&str]) -> Server {
    let bus = free_port().to_string();
    Server::with_module_args(
        module_args,
        &[
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus,
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ],
    )
}

/// Three masters with the slots spread by `redis-cli --cluster create`, ready (`cluster_state:ok`).
pub fn cluster() -> Vec<Server> {
    let nodes: Vec<Server> = (0..3).map(|_| node()).collect();
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
