//! Which replicas run the module, as the master learns it: each replica tells its master over a
//! connection it opens itself, the way it replicates (`LOCK.REPLCONF`, proven by the challenge
//! in the replication stream), so a replica the master cannot reach joins the set; no client
//! can say it for a replica; no grant counts while a replica without the module is attached, so
//! promoting it loses none; and the master's heartbeat does not stop a replica without the
//! module, whatever its `propagation-error-behavior`.

mod common;

use std::thread;
use std::time::Duration;

use common::{Server, acquire, acquire_counted, call, error, info_field, lock_info, wait_until};
use redis::{Connection, Value};

fn lock_field(con: &mut Connection, field: &str) -> String {
    info_field(con, "lock", field).unwrap_or_default()
}

fn load_module(con: &mut Connection) {
    let module = common::module_path().to_string_lossy().into_owned();
    assert_eq!(call(con, &["MODULE", "LOAD", &module]), Value::Okay);
}

/// A replica at `maxclients`: the master could not open a connection to it, but it replicates,
/// so it tells its master it runs the module over its own connection and joins the set.
#[test]
fn a_replica_the_master_cannot_reach_joins_the_set() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    let mut r = replica.client();
    call(&mut r, &["CONFIG", "SET", "maxclients", "1"]);
    let refused = replica
        .try_client()
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
    assert!(refused.is_err(), "the replica takes no more connections");
    call(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    let id = format!("127.0.0.1:{}", replica.port);
    let mut m = master.client();
    wait_until("the replica joins the set", || {
        lock_field(&mut m, "lock_insync_members") == id
    });
    assert_eq!(lock_field(&mut r, "lock_insync_said"), "ok");
    acquire_counted(&mut m, "job", "a", 60_000);
}

/// Anyone may send `LOCK.REPLCONF`, even before `AUTH`, but only the challenge the master sent
/// in its replication stream makes it count: a replica without the module stays out, and no
/// grant counts while it is attached.
#[test]
fn no_client_can_say_it_for_a_replica() {
    let master = Server::without_module(&["--enable-module-command", "yes"]);
    let plain = Server::without_module(&[]);
    plain.replicate(&master);
    let mut m = master.client();
    load_module(&mut m);
    let id = format!("127.0.0.1:{}", plain.port);
    call(
        &mut m,
        &[
            "CONFIG",
            "SET",
            "requirepass",
            "secret",
            "masterauth",
            "secret",
        ],
    );
    let mut anonymous = master.client();
    for challenge in ["-", "00000000000000000000000000000000", ""] {
        let refused = error(
            &mut anonymous,
            &[
                "LOCK.REPLCONF",
                "CHALLENGE",
                challenge,
                "LISTENING-PORT",
                &plain.port.to_string(),
            ],
        );
        assert!(
            refused.starts_with("ERR LOCK.REPLCONF challenge is not this master's current one"),
            "{refused}"
        );
    }
    call(&mut m, &["AUTH", "secret"]);
    wait_until("the master finds the replica silent", || {
        lock_field(&mut m, "lock_insync_without_module") == id
    });
    let refused = error(&mut m, &["LOCK.ACQUIRE", "job", "a", "60000"]);
    assert!(
        refused.starts_with(&format!(
            "NOREPLICAS replica {id} has not said it runs the lock module"
        )),
        "{refused}"
    );
    assert_eq!(call(&mut m, &["EXISTS", "job"]), Value::Int(0), "released");
}

/// Issue 53's sequence 2: a master with the module, a replica with it, and one without it that
/// Sentinel would prefer. A grant is never counted while the replica without the module is
/// attached, so when the master dies and that replica is promoted (and loads the module), the
/// next owner's grant is no double grant.
#[test]
fn promoting_a_replica_without_the_module_loses_no_counted_grant() {
    let mut master = Server::without_module(&["--enable-module-command", "yes"]);
    let member = Server::start(&[]);
    let plain =
        Server::without_module(&["--enable-module-command", "yes", "--replica-priority", "10"]);
    member.replicate(&master);
    plain.replicate(&master);
    let mut m = master.client();
    load_module(&mut m);
    let id = format!("127.0.0.1:{}", member.port);
    wait_until("the replica with the module joins the set", || {
        lock_field(&mut m, "lock_insync_members") == id
    });
    let refused = error(&mut m, &["LOCK.ACQUIRE", "job", "a", "60000", "SYNC"]);
    assert!(
        refused.starts_with("NOREPLICAS"),
        "A is not granted: {refused}"
    );
    let insync = common::insync(&mut m);
    assert!(
        insync.acked == 0,
        "LOCK.INSYNC counts nothing either: {insync:?}"
    );

    // The member, which would keep reconnecting to the dead master's port (another test's
    // server may take it), is not needed past this point.
    drop(member);
    master.kill();
    let mut p = plain.client();
    assert_eq!(call(&mut p, &["REPLICAOF", "NO", "ONE"]), Value::Okay);
    load_module(&mut p);
    let token = acquire(&mut p, "job", "b", 60_000, &["NOSYNC"]).expect("B is granted");
    assert!(token > 0);
    assert_eq!(
        lock_info(&mut p, "job").map(|info| info.0),
        Some("b".to_owned()),
        "B is the only holder A's refusal left"
    );
}

/// A replica without the module, with `propagation-error-behavior panic-on-replicas`, under a
/// master that loads the module: the heartbeat reaches it as a `PING`, once a second, and it
/// keeps running.
#[test]
fn the_heartbeat_does_not_stop_a_replica_without_the_module() {
    let master = Server::without_module(&["--enable-module-command", "yes"]);
    let plain = Server::without_module(&["--propagation-error-behavior", "panic-on-replicas"]);
    plain.replicate(&master);
    let mut p = plain.client();
    let pings = |p: &mut Connection| -> u64 {
        let stats = info_field(p, "commandstats", "cmdstat_ping").unwrap_or_default();
        stats
            .split(',')
            .find_map(|field| field.strip_prefix("calls=")?.parse().ok())
            .unwrap_or(0)
    };
    let before = pings(&mut p);
    load_module(&mut master.client());
    thread::sleep(Duration::from_secs(5));
    assert_eq!(call(&mut p, &["PING"]), Value::SimpleString("PONG".into()));
    let heard = pings(&mut p) - before;
    assert!(heard >= 4, "the heartbeats came as PINGs: {heard}");
    assert!(!plain.log().contains("CRITICAL"), "{}", plain.log());
}
