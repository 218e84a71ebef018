//! `LOCK.GUARD` and `LOCK.FENCED`: a command that runs only while its lock is held, or only
//! with a token no smaller than a fence's — checked, run, replicated and persisted on real
//! servers; every refusal changes nothing.

mod common;

use std::thread;
use std::time::Duration;

use common::{Server, acquire, call, dump, error, promote, restore, wait_replicas};
use redis::{Connection, Value};

fn stock(con: &mut Connection) -> Value {
    call(con, &["GET", "stock"])
}

/// A server with `stock` at 10 and the lock `order` held by `alice` (30 s); her token.
fn held_stock(server: &Server) -> (Connection, i64) {
    let mut con = server.client();
    call(&mut con, &["SET", "stock", "10"]);
    let token = acquire(&mut con, "order", "alice", 30_000, &[]).expect("granted");
    (con, token)
}

#[test]
fn the_holder_runs_the_command_and_everyone_else_is_refused_with_nothing_changed() {
    let server = Server::start(&[]);
    let (mut con, token) = held_stock(&server);
    fn guard(owner: &str) -> [&str; 3] {
        ["LOCK.GUARD", "order", owner]
    }
    let decr = ["DECRBY", "stock", "1"];
    assert_eq!(
        call(&mut con, &[&guard("alice")[..], &decr].concat()),
        Value::Int(9)
    );
    let own_token = token.to_string();
    let with_token = [&guard("alice")[..], &["TOKEN", &own_token], &decr].concat();
    assert_eq!(call(&mut con, &with_token), Value::Int(8));
    for (args, why) in [
        (
            [&guard("bob")[..], &decr].concat(),
            "NOTHELD the lock is held by another owner",
        ),
        (
            [&["LOCK.GUARD", "free", "alice"][..], &decr].concat(),
            "NOTHELD the lock is free",
        ),
        (
            [&guard("alice")[..], &["TOKEN", "1"], &decr].concat(),
            "NOTHELD the owner holds the lock with token",
        ),
    ] {
        let refused = error(&mut con, &args);
        assert!(refused.starts_with(why), "{args:?}: {refused}");
    }
    assert_eq!(stock(&mut con), Value::BulkString(b"8".to_vec()));
}

#[test]
fn a_holder_whose_lease_ended_is_refused() {
    let server = Server::start(&[]);
    let mut con = server.client();
    call(&mut con, &["SET", "stock", "10"]);
    acquire(&mut con, "order", "alice", 100, &[]).expect("granted");
    thread::sleep(Duration::from_millis(200));
    let refused = error(
        &mut con,
        &["LOCK.GUARD", "order", "alice", "DECRBY", "stock", "1"],
    );
    assert!(refused.starts_with("NOTHELD the lock is free"), "{refused}");
    assert_eq!(stock(&mut con), Value::BulkString(b"10".to_vec()));
}

#[test]
fn a_shared_holder_runs_the_command_and_replies_come_as_the_command_gave_them() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "report", "reader", 30_000, &["SHARED"]).expect("granted");
    call(&mut con, &["HSET", "h", "f", "line\r\nbreak"]);
    assert_eq!(
        call(
            &mut con,
            &["LOCK.GUARD", "report", "reader", "HGET", "h", "f"]
        ),
        Value::BulkString(b"line\r\nbreak".to_vec()),
        "a bulk string stays one, whatever its bytes"
    );
    assert_eq!(
        call(&mut con, &["LOCK.GUARD", "report", "reader", "PING"]),
        Value::SimpleString("PONG".into())
    );
    let mut resp3 = server.resp3();
    let map = call(
        &mut resp3,
        &["LOCK.GUARD", "report", "reader", "HGETALL", "h"],
    );
    assert!(matches!(map, Value::Map(_)), "RESP3 keeps its map: {map:?}");
}

#[test]
fn bad_commands_are_refused_before_anything_runs() {
    let server = Server::start(&[]);
    let (mut con, _) = held_stock(&server);
    let before = call(&mut con, &["LOCK.FENCE", "order", "alice"]);
    for (command, why) in [
        (&[][..], "ERR wrong number of arguments"),
        (&["TOKEN", "5"][..], "ERR no command to run"),
        (
            &["TOKEN", "0", "GET", "stock"][..],
            "ERR token out of range",
        ),
        (&["BLPOP", "list", "0"][..], "ERR 'blpop' cannot be guarded"),
        (&["MULTI"][..], "ERR 'multi' cannot be guarded"),
        (&["EXEC"][..], "ERR 'exec' cannot be guarded"),
        (
            &["EVAL", "return 1", "0"][..],
            "ERR 'eval' cannot be guarded",
        ),
        (
            &["NOSUCHCOMMAND"][..],
            "ERR unknown command 'nosuchcommand'",
        ),
        (&["DEL", "order"][..], "ERR the command may not touch"),
        (
            &["LOCK.RELEASE", "order", "alice"][..],
            "ERR the lock module's own",
        ),
        (
            &["SET", "stock"][..],
            "ERR wrong number of arguments for 'set'",
        ),
    ] {
        let args = [&["LOCK.GUARD", "order", "alice"][..], command].concat();
        let refused = error(&mut con, &args);
        assert!(refused.starts_with(why), "{args:?}: {refused}");
    }
    call(&mut con, &["MULTI"]);
    call(
        &mut con,
        &["LOCK.GUARD", "order", "alice", "SYNC", "GET", "stock"],
    );
    let in_multi = error(&mut con, &["EXEC"]);
    assert!(
        in_multi.contains("SYNC cannot be used inside MULTI"),
        "{in_multi}"
    );
    assert_eq!(call(&mut con, &["LOCK.FENCE", "order", "alice"]), before);
    assert_eq!(stock(&mut con), Value::BulkString(b"10".to_vec()));
    assert_eq!(
        error(&mut con, &["LOCK.GUARD", "stock", "alice", "GET", "x"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
}

#[test]
fn the_command_runs_with_the_callers_acl_rights() {
    let server = Server::start(&[]);
    let (mut admin, _) = held_stock(&server);
    call(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">pass",
            "~order",
            "~stock",
            "+lock.guard",
            "+lock.fenced",
            "+get",
        ],
    );
    let app = server.open("").expect("client");
    let mut app = {
        let mut con = app.get_connection().expect("connect");
        call(&mut con, &["AUTH", "app", "pass"]);
        con
    };
    assert_eq!(
        call(&mut app, &["LOCK.GUARD", "order", "alice", "GET", "stock"]),
        Value::BulkString(b"10".to_vec())
    );
    let refused = error(&mut app, &["LOCK.GUARD", "order", "alice", "DECR", "stock"]);
    assert!(refused.starts_with("NOPERM"), "no DECR: {refused}");
    let refused = error(&mut app, &["LOCK.GUARD", "order", "alice", "GET", "other"]);
    assert!(refused.starts_with("NOPERM"), "not its key: {refused}");
    let refused = error(&mut app, &["LOCK.FENCED", "fence", "5", "GET", "stock"]);
    assert!(
        refused.starts_with("NOPERM"),
        "not the fence's key: {refused}"
    );
    assert_eq!(stock(&mut admin), Value::BulkString(b"10".to_vec()));
    assert_eq!(call(&mut admin, &["EXISTS", "fence"]), Value::Int(0));
    drop(app);
}

#[test]
fn guarded_and_fenced_writes_reach_the_replica_and_the_aof_as_themselves() {
    let master = Server::start(&["--appendonly", "yes"]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let (mut m, _) = held_stock(&master);
    wait_replicas(&mut m, 1);
    // Synced by default: the reply comes once the replica has it.
    assert_eq!(
        call(
            &mut m,
            &["LOCK.GUARD", "order", "alice", "DECRBY", "stock", "3"]
        ),
        Value::Int(7)
    );
    call(
        &mut m,
        &[
            "LOCK.FENCED",
            "fence",
            "40",
            "NOSYNC",
            "SET",
            "job",
            "done-40",
        ],
    );
    call(&mut m, &["LOCK.FENCED", "fence", "42", "SPOP", "stock-set"]);
    wait_replicas(&mut m, 1);
    let mut r = replica.client();
    assert_eq!(stock(&mut r), Value::BulkString(b"7".to_vec()));
    assert_eq!(
        call(&mut r, &["TYPE", "fence"]),
        Value::SimpleString("lockfence".into())
    );
    assert_eq!(
        call(&mut m, &["DEBUG", "DIGEST"]),
        call(&mut r, &["DEBUG", "DIGEST"])
    );
    promote(&mut r);
    let refused = error(
        &mut r,
        &["LOCK.FENCED", "fence", "41", "SET", "job", "stale"],
    );
    assert!(
        refused.starts_with("STALE token 41 is below 42"),
        "{refused}"
    );
    drop(m);
    let mut master = master;
    master.shutdown("NOSAVE");
    master.restart();
    let mut m = master.client();
    assert_eq!(stock(&mut m), Value::BulkString(b"7".to_vec()));
    let refused = error(
        &mut m,
        &["LOCK.FENCED", "fence", "41", "SET", "job", "stale"],
    );
    assert!(refused.starts_with("STALE"), "after the AOF: {refused}");
}

#[test]
fn a_fence_refuses_a_smaller_token_after_a_larger_one_wrote_and_keeps_it_everywhere() {
    let mut server = Server::start(&["--appendonly", "yes"]);
    let mut con = server.client();
    fn fenced(con: &mut Connection, token: &str, value: &str) -> Result<Value, String> {
        redis::cmd("LOCK.FENCED")
            .arg(&["fence", token, "SET", "job", value][..])
            .query::<Value>(con)
            .map_err(|error| common::described(&error))
    }
    assert_eq!(fenced(&mut con, "7", "seven"), Ok(Value::Okay));
    let usage = call(&mut con, &["MEMORY", "USAGE", "fence"]);
    assert_eq!(
        fenced(&mut con, "7", "seven-again"),
        Ok(Value::Okay),
        "equal writes"
    );
    assert_eq!(fenced(&mut con, "9", "nine"), Ok(Value::Okay));
    let stale = fenced(&mut con, "8", "eight").expect_err("stale");
    assert!(stale.starts_with("STALE token 8 is below 9"), "{stale}");
    // A command that fails raises nothing.
    call(&mut con, &["SET", "text", "x"]);
    let failed = error(&mut con, &["LOCK.FENCED", "fence", "20", "INCR", "text"]);
    assert!(
        failed.starts_with("ERR value is not an integer"),
        "{failed}"
    );
    assert_eq!(fenced(&mut con, "10", "ten"), Ok(Value::Okay));
    assert_eq!(
        call(&mut con, &["GET", "job"]),
        Value::BulkString(b"ten".to_vec())
    );
    for token in 11..200 {
        fenced(&mut con, &token.to_string(), "later").expect("a larger token");
    }
    assert_eq!(
        call(&mut con, &["MEMORY", "USAGE", "fence"]),
        usage,
        "O(1) memory"
    );
    assert_eq!(fenced(&mut con, "200", "ten"), Ok(Value::Okay));
    let payload = dump(&mut con, "fence");
    restore(&mut con, "restored", 0, &payload).expect("RESTORE");
    call(&mut con, &["COPY", "fence", "copied"]);
    for key in ["restored", "copied"] {
        let refused = error(&mut con, &["LOCK.FENCED", key, "9", "GET", "job"]);
        assert!(
            refused.starts_with("STALE token 9 is below 200"),
            "{key}: {refused}"
        );
    }
    let mut bad = payload.clone();
    if let Some(byte) = bad.get_mut(1) {
        *byte ^= 0xff;
    }
    assert!(
        restore(&mut con, "bad", 0, &bad).is_err(),
        "a damaged payload"
    );
    call(&mut con, &["BGREWRITEAOF"]);
    common::wait_until("the AOF rewrite", || {
        common::info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref()
            == Some("0")
    });
    drop(con);
    server.shutdown("NOSAVE");
    server.restart();
    let mut con = server.client();
    for key in ["fence", "restored", "copied"] {
        let refused = error(&mut con, &["LOCK.FENCED", key, "9", "GET", "job"]);
        assert!(
            refused.starts_with("STALE"),
            "{key} after the rewrite: {refused}"
        );
    }
    assert_eq!(fenced(&mut con, "200", "again"), Ok(Value::Okay));
    assert_eq!(
        error(&mut con, &["LOCK.FENCED", "job", "11", "GET", "x"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    for (args, why) in [
        (
            &["LOCK.FENCED", "fence", "0", "GET", "x"][..],
            "ERR token out of range",
        ),
        (
            &["LOCK.FENCED", "fence", "-1", "GET", "x"][..],
            "ERR token out of range",
        ),
        (
            &["LOCK.FENCED", "fence", "x", "GET", "x"][..],
            "ERR token out of range",
        ),
        (
            &["LOCK.FENCED", "fence", "12", "NOSYNC"][..],
            "ERR no command to run",
        ),
        (
            &["LOCK.FENCED", "fence", "12", "SET", "fence", "x"][..],
            "ERR the command may not touch",
        ),
    ] {
        let refused = error(&mut con, args);
        assert!(refused.starts_with(why), "{args:?}: {refused}");
    }
    let refused = error(&mut con, &["LOCK.APPLY", "fence", "FENCE", "99"]);
    assert!(refused.contains("clients cannot call it"), "{refused}");
}

#[test]
fn redis_finds_the_keys_of_the_guarded_command() {
    let server = Server::start(&[]);
    let mut con = server.client();
    fn keys(con: &mut Connection, args: &[&str]) -> Value {
        call(con, &[&["COMMAND", "GETKEYS"][..], args].concat())
    }
    let bulk = |keys: &[&str]| {
        Value::Array(
            keys.iter()
                .map(|key| Value::BulkString(key.as_bytes().to_vec()))
                .collect(),
        )
    };
    assert_eq!(
        keys(
            &mut con,
            &["LOCK.GUARD", "order", "alice", "MSET", "a", "1", "b", "2"]
        ),
        bulk(&["order", "a", "b"])
    );
    assert_eq!(
        keys(
            &mut con,
            &["LOCK.FENCED", "fence", "5", "SYNC", "DECRBY", "stock", "1"]
        ),
        bulk(&["fence", "stock"])
    );
}

/// docs/fencing-in-redis.md: a holder that paused past its lease writes after another owner
/// took the lock — the counter goes wrong without the guard, and stays right with it.
#[test]
fn a_holder_that_paused_past_its_lease_cannot_write_through_the_guard() {
    let server = Server::start(&[]);
    let mut con = server.client();
    call(&mut con, &["SET", "stock:42", "10"]);
    let first = acquire(&mut con, "order:42", "worker-1", 200, &[]).expect("granted");
    thread::sleep(Duration::from_millis(300));
    acquire(&mut con, "order:42", "worker-2", 5_000, &[]).expect("the lease ended");
    let sold = [
        "LOCK.GUARD",
        "order:42",
        "worker-2",
        "DECRBY",
        "stock:42",
        "1",
    ];
    assert_eq!(call(&mut con, &sold), Value::Int(9));
    let refused = error(
        &mut con,
        &[
            "LOCK.GUARD",
            "order:42",
            "worker-1",
            "DECRBY",
            "stock:42",
            "1",
        ],
    );
    assert!(
        refused.starts_with("NOTHELD the lock is held by another owner"),
        "{refused}"
    );
    let stale = [
        "LOCK.FENCED",
        "fence:stock:42",
        &first.to_string(),
        "DECRBY",
        "stock:42",
        "1",
    ];
    let second = call(&mut con, &["LOCK.FENCE", "order:42", "worker-2"]);
    let Value::Int(second) = second else {
        panic!("worker-2's token: {second:?}");
    };
    let newer = [
        "LOCK.FENCED",
        "fence:stock:42",
        &second.to_string(),
        "DECRBY",
        "stock:42",
        "1",
    ];
    assert_eq!(call(&mut con, &newer), Value::Int(8));
    let refused = error(&mut con, &stale);
    assert!(refused.starts_with("STALE"), "{refused}");
    assert_eq!(
        call(&mut con, &["GET", "stock:42"]),
        Value::BulkString(b"8".to_vec())
    );
    // Without the guard the paused holder's write goes through: one sale counted twice.
    call(&mut con, &["DECRBY", "stock:42", "1"]);
    assert_eq!(
        call(&mut con, &["GET", "stock:42"]),
        Value::BulkString(b"7".to_vec())
    );
}

/// A guarded write's reply held for the in-sync set goes out later, after its command ended:
/// copied then, with its types (a simple string, a bulk one with any bytes, an integer, an
/// array, RESP3's doubles), and the server keeps running.
#[test]
fn a_held_reply_goes_out_as_the_command_gave_it() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let (mut m, _) = held_stock(&master);
    wait_replicas(&mut m, 1);
    common::wait_for_member(&mut m);
    fn guard<'a>(command: &[&'a str]) -> Vec<&'a str> {
        [&["LOCK.GUARD", "order", "alice", "SYNC"][..], command].concat()
    }
    call(&mut m, &["SET", "text", "line\r\nbreak"]);
    assert_eq!(call(&mut m, &guard(&["SET", "flag", "on"])), Value::Okay);
    assert_eq!(
        call(&mut m, &guard(&["SET", "text", "new", "GET"])),
        Value::BulkString(b"line\r\nbreak".to_vec())
    );
    assert_eq!(call(&mut m, &guard(&["INCR", "count"])), Value::Int(1));
    call(&mut m, &["RPUSH", "list", "a", "b"]);
    assert_eq!(
        call(&mut m, &guard(&["LPOP", "list", "2"])),
        Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"b".to_vec())
        ])
    );
    let mut resp3 = master.resp3();
    let score = call(&mut resp3, &guard(&["ZINCRBY", "scores", "1.5", "m"]));
    assert_eq!(score, Value::Double(1.5), "RESP3's double");
    assert_eq!(call(&mut m, &["PING"]), Value::SimpleString("PONG".into()));
}
