//! A master and its replicas, for the tests of syncing and of the pools.

#![allow(dead_code)] // each test file uses its own part

use crate::common::{self, Server, call, info_field};

/// A master and its replica, online, acknowledging writes and in the master's in-sync set.
pub fn pair() -> (Server, Server) {
    pair_with(&[])
}

/// [`pair`], both servers started with `args`.
pub fn pair_with(args: &[&str]) -> (Server, Server) {
    let master = Server::start(args);
    let replica = Server::start(args);
    attach(&master, &replica, 1);
    (master, replica)
}

/// A master and `replicas` replicas, all with the module started with `module_args`
/// (`["min-insync-replicas", "2"]`), every replica in the master's in-sync set.
pub fn group(module_args: &[&str], replicas: usize) -> (Server, Vec<Server>) {
    let master = Server::with_module_args(module_args, &[]);
    let replicas: Vec<Server> = (1..=replicas)
        .map(|count| {
            let replica = Server::with_module_args(module_args, &[]);
            attach(&master, &replica, count);
            replica
        })
        .collect();
    (master, replicas)
}

/// Makes `replica` a replica of `master`, and waits until it acknowledges writes and the
/// master's in-sync set has `members`.
fn attach(master: &Server, replica: &Server, members: usize) {
    replica.replicate(master);
    let mut con = master.client();
    call(&mut con, &["SET", "settled", "1"]);
    common::wait_replicas(&mut con, members);
    wait_insync(master, members);
}

/// How many replicas are in the master's in-sync set (`INFO lock`: `lock_insync_replicas`;
/// Redis prefixes the module's fields with its name).
pub fn insync_replicas(master: &Server) -> Option<usize> {
    let field = info_field(&mut master.client(), "lock", "lock_insync_replicas");
    field.and_then(|count| count.trim().parse().ok())
}

/// Waits until the master's in-sync set has `members` replicas.
pub fn wait_insync(master: &Server, members: usize) {
    let what = format!("{members} replicas in the master's in-sync set");
    common::wait_until(&what, || insync_replicas(master) == Some(members));
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
