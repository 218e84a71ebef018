//! `MODULE LOAD` into a running replicated deployment, in either order: the master finds that a
//! replica has not said it runs the module, counts no write while it is attached, says so in its
//! log, in `INFO lock` and in `NOREPLICAS`, and sends the locks again to a replica that loads
//! the module after missing lock writes; a replica loaded first keeps replicating without an
//! error, and stays promotable as Redis would make it until its master loads the module.

mod common;

use common::{Server, acquire, acquire_counted, call, info_field, insync, wait_until};
use redis::{Connection, Value};

/// A master and a replica, neither with the module, `MODULE` allowed on both; and the
/// replica's `ip:port` as the master names it.
fn pair_without_module() -> (Server, Server, String) {
    let master = Server::without_module(&["--enable-module-command", "yes"]);
    let replica = Server::without_module(&["--enable-module-command", "yes"]);
    replica.replicate(&master);
    let id = format!("127.0.0.1:{}", replica.port);
    (master, replica, id)
}

/// `LOCK.FENCE key owner` on `con`, which must hold the lock.
fn fence(con: &mut Connection, key: &str, owner: &str) -> i64 {
    redis::cmd("LOCK.FENCE")
        .arg(key)
        .arg(owner)
        .query(con)
        .expect("the lock is held")
}

fn load_module(con: &mut Connection) {
    let module = common::module_path().to_string_lossy().into_owned();
    assert_eq!(
        call(con, &["MODULE", "LOAD", &module]),
        Value::Okay,
        "MODULE LOAD"
    );
}

fn lock_field(con: &mut Connection, field: &str) -> String {
    info_field(con, "lock", field).unwrap_or_default()
}

/// What a server must never log while the module is loaded in the right order: a replica that
/// could not apply or load the master's lock data, or a master that found one without it.
const ERRORS: [&str; 4] = [
    "CRITICAL",
    "can't load",
    "has not said it runs the lock module",
    "missed lock writes",
];

fn assert_clean(server: &Server, which: &str) {
    let log = server.log();
    for error in ERRORS {
        assert!(
            !log.contains(error),
            "the {which}'s log has {error:?}:\n{log}"
        );
    }
}

#[test]
fn module_load_on_the_master_first_keeps_a_replica_without_it_out_of_the_set() {
    let (master, replica, id) = pair_without_module();
    let mut m = master.client();
    let mut r = replica.client();
    load_module(&mut m);
    wait_until("the master finds the replica without the module", || {
        lock_field(&mut m, "lock_insync_without_module") == id
    });
    wait_until("the master's log names the replica", || {
        master.log().contains(&format!(
            "replica {id} has not said it runs the lock module"
        ))
    });
    let refused = common::error(&mut m, &["LOCK.ACQUIRE", "order:1", "worker-a", "60000"]);
    assert!(
        refused.starts_with(&format!(
            "NOREPLICAS replica {id} has not said it runs the lock module"
        )),
        "no grant counts as synced by a replica without the module: {refused}"
    );
    let token = acquire(&mut m, "order:1", "worker-a", 60_000, &["NOSYNC"]).expect("granted");
    let status = insync(&mut m);
    assert_eq!((status.members, status.required), (0, 1));

    load_module(&mut r);
    wait_until("the replica joins the set", || {
        lock_field(&mut m, "lock_insync_members") == id
    });
    let log = master.log();
    assert!(
        log.contains(&format!(
            "replica {id} runs the lock module now, and missed lock writes"
        )) && log.contains("every lock was sent again"),
        "the master sent the locks again:\n{log}"
    );
    assert_eq!(lock_field(&mut m, "lock_insync_without_module"), "");
    assert_eq!(
        fence(&mut r, "order:1", "worker-a"),
        token,
        "the replica has the lock"
    );
    acquire_counted(&mut m, "order:2", "worker-b", 60_000);
}

#[test]
fn module_load_on_the_replica_first_then_the_master_replicates_without_an_error() {
    let (master, replica, id) = pair_without_module();
    let mut m = master.client();
    let mut r = replica.client();
    load_module(&mut r);
    wait_until("the replica finds its master without the module", || {
        lock_field(&mut r, "lock_insync_promotable_by") == "master-without-module"
    });
    assert_eq!(
        call(&mut r, &["CONFIG", "GET", "replica-priority"]),
        Value::Array(vec![
            Value::BulkString(b"replica-priority".to_vec()),
            Value::BulkString(b"100".to_vec())
        ]),
        "promotable as Redis would make it: nothing to protect yet"
    );
    load_module(&mut m);
    wait_until("the replica joins the set", || {
        lock_field(&mut m, "lock_insync_members") == id
    });
    let token = acquire_counted(&mut m, "order:1", "worker-a", 60_000);
    assert_eq!(
        fence(&mut r, "order:1", "worker-a"),
        token,
        "the replica has the lock"
    );
    wait_until("the replica is promotable", || {
        lock_field(&mut r, "lock_insync_promotable") == "1"
    });
    assert_clean(&master, "master");
    assert_clean(&replica, "replica");
}
/// `MODULE LOAD` on a running master whose replica lacks the module: the replica's next full
/// sync still loads (Redis stops a server that finds module data it cannot load), since the
/// module saves nothing in the RDB before it issued a token (`aux_save2`, Redis 7.2 and later,
/// and Valkey; Redis 7.0 always writes the module's field, so there the module goes on the
/// replicas first: docs/operations/upgrading.md). The master finds the replica, new to it,
/// without the module.
#[test]
fn module_load_on_a_running_master_leaves_a_replica_without_it_running() {
    let master = Server::without_module(&["--enable-module-command", "yes"]);
    let mut replica = Server::without_module(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    let version = info_field(&mut m, "server", "redis_version").expect("a version");
    let (major, minor) = version
        .split_once('.')
        .and_then(|(major, rest)| {
            Some((
                major.parse::<u32>().ok()?,
                rest.split('.').next()?.parse::<u32>().ok()?,
            ))
        })
        .expect("a version");
    if (major, minor) < (7, 2) {
        eprintln!("Redis {version} has no aux_save2: the module's field is always in the RDB");
        return;
    }
    let module = common::module_path().to_string_lossy().into_owned();
    call(&mut m, &["MODULE", "LOAD", &module]);
    call(&mut m, &["SET", "plain", "value"]);
    // A full sync: the replica restarts with nothing.
    replica.restart_empty();
    replica.replicate(&master);
    let mut r = replica.client();
    assert_eq!(
        call(&mut r, &["GET", "plain"]),
        Value::BulkString(b"value".to_vec()),
        "the replica loaded its master's full sync"
    );
    let id = format!("127.0.0.1:{}", replica.port);
    wait_until(
        "the master finds the new replica without the module",
        || lock_field(&mut m, "lock_insync_without_module") == id,
    );
}
