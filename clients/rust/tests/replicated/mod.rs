//! A master and its replica, for the tests of syncing and of the pools.

#![allow(dead_code)] // each test file uses its own part

use crate::common::{self, Server, call, info_field};

/// A master and its replica, online as the master sees it (the count a client learns) and
/// acknowledging writes.
pub fn pair() -> (Server, Server) {
    pair_with(&[])
}

/// [`pair`], both servers started with `args`.
pub fn pair_with(args: &[&str]) -> (Server, Server) {
    let master = Server::start(args);
    let replica = Server::start(args);
    replica.replicate(&master);
    let mut con = master.client();
    common::wait_until("the master counts its replica online", || {
        info_field(&mut con, "replication", "slave0").is_some_and(|s| s.contains("state=online"))
    });
    call(&mut con, &["SET", "settled", "1"]);
    common::wait_replicas(&mut con, 1);
    (master, replica)
}

/// How many times the server ran `command` (`INFO commandstats`), e.g. `wait`, `lock.renew`.
pub fn calls(server: &Server, command: &str) -> u64 {
    let field = format!("cmdstat_{command}");
    let stats = info_field(&mut server.client(), "commandstats", &field);
    stats.map_or(0, |s| {
        let calls = s.split(',').next().and_then(|c| c.strip_prefix("calls="));
        calls.and_then(|c| c.parse().ok()).unwrap_or(0)
    })
}
