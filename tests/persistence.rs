//! Locks and the fencing counter through every persistence path, really done: `DEBUG RELOAD`,
//! restart from RDB, restart from AOF with and without the RDB preamble, `COPY`, `MEMORY USAGE` and `DEBUG DIGEST-VALUE`.

mod common;

use common::{LockInfo, Server, acquire, assert_same_holding, call, lock_info, wait_until};
use redis::{Connection, Value};

/// Takes two locks (one re-entered) and a third that is released, returning the largest token.
fn take_locks(con: &mut Connection) -> i64 {
    let a = acquire(con, "a", "alice", 600_000, &[]).expect("a");
    acquire(con, "a", "alice", 600_000, &["REENTRANT"]).expect("a again");
    let b = acquire(con, "b", "bob", 300_000, &[]).expect("b");
    let c = acquire(con, "c", "carol", 300_000, &[]).expect("c");
    assert_eq!(call(con, &["LOCK.RELEASE", "c", "carol"]), Value::Int(1));
    a.max(b).max(c)
}

fn snapshot(con: &mut Connection) -> (Option<LockInfo>, Option<LockInfo>) {
    (lock_info(con, "a"), lock_info(con, "b"))
}

/// The locks are the same after the reload (the lease only shorter), and the next token is
/// larger than every token before.
fn assert_survived(
    con: &mut Connection,
    before: &(Option<LockInfo>, Option<LockInfo>),
    last_token: i64,
) {
    let after = snapshot(con);
    for (was, is) in [(&before.0, &after.0), (&before.1, &after.1)] {
        let (was, is) = (
            was.as_ref().expect("held before"),
            is.as_ref().expect("held after"),
        );
        assert_same_holding(was, is, 30_000);
    }
    assert_eq!(lock_info(con, "c"), None);
    let next = acquire(con, "d", "dave", 1_000, &[]).expect("d");
    assert!(
        next > last_token,
        "token went back: {next} after {last_token}"
    );
}

/// The contents of the AOF's base file (written by the rewrite) and of its incremental files.
fn aof_files(server: &Server) -> (String, String) {
    let mut base = String::new();
    let mut incremental = String::new();
    let entries = std::fs::read_dir(server.dir().join("appendonlydir")).expect("appendonlydir");
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let text =
            String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap_or_default()).into_owned();
        if name.contains(".base.") {
            base.push_str(&text);
        } else if name.contains(".incr.") {
            incremental.push_str(&text);
        }
    }
    (base, incremental)
}

#[test]
fn debug_reload_keeps_locks_and_the_counter() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let last = take_locks(&mut con);
    let before = snapshot(&mut con);
    call(&mut con, &["DEBUG", "RELOAD"]);
    assert_survived(&mut con, &before, last);
}

#[test]
fn restart_from_rdb_keeps_locks_and_the_counter() {
    let mut server = Server::start(&["--save", "3600 1"]);
    let mut con = server.client();
    let last = take_locks(&mut con);
    let before = snapshot(&mut con);
    server.shutdown("SAVE");
    server.restart();
    assert_survived(&mut server.client(), &before, last);
}

#[test]
fn restart_from_an_rdb_with_no_locks_still_continues_the_counter() {
    let mut server = Server::start(&["--save", "3600 1"]);
    let mut con = server.client();
    let last = take_locks(&mut con);
    call(&mut con, &["FLUSHALL"]);
    server.shutdown("SAVE");
    server.restart();
    let next = acquire(&mut server.client(), "a", "x", 1_000, &[]).expect("granted");
    assert!(next > last);
}

fn restart_from_aof(preamble: &str) {
    let mut server = Server::start(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]);
    let mut con = server.client();
    take_locks(&mut con);
    call(&mut con, &["BGREWRITEAOF"]);
    wait_until("AOF rewrite", || {
        common::info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref()
            == Some("0")
            && common::info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref()
                == Some("0")
    });
    // Writes after the rewrite go to the incremental AOF as LOCK.APPLY effects.
    let renewed = call(&mut con, &["LOCK.RENEW", "b", "bob", "400000"]);
    assert_eq!(renewed, Value::Int(1));
    let e = acquire(&mut con, "e", "erin", 300_000, &["REENTRANT"]).expect("e");
    let before = snapshot(&mut con);
    let (base, incremental) = aof_files(&server);
    assert!(
        incremental.contains("LOCK.APPLY"),
        "effects in the incremental AOF"
    );
    if preamble == "no" {
        assert!(
            base.contains("LOCK.APPLY"),
            "the type's AOF rewrite wrote the base"
        );
        assert!(!base.contains("REDIS0"), "no RDB preamble");
    } else {
        assert!(base.starts_with("REDIS0"), "an RDB preamble");
    }
    server.kill();
    server.restart();
    let mut con = server.client();
    assert_eq!(lock_info(&mut con, "e").map(|i| (i.1, i.3)), Some((e, 1)));
    assert_survived(&mut con, &before, e);
}

#[test]
fn restart_from_aof_with_rdb_preamble_keeps_locks_and_the_counter() {
    restart_from_aof("yes");
}

#[test]
fn restart_from_aof_without_rdb_preamble_keeps_locks_and_the_counter() {
    restart_from_aof("no");
}

#[test]
fn copy_duplicates_a_lock() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    assert_eq!(call(&mut con, &["COPY", "k", "k2"]), Value::Int(1));
    assert_eq!(
        lock_info(&mut con, "k2").map(|i| (i.0, i.1, i.3)),
        Some(("alice".into(), token, 1))
    );
    call(&mut con, &["LOCK.RELEASE", "k", "alice"]);
    assert!(
        lock_info(&mut con, "k2").is_some(),
        "the copy is independent"
    );
}

#[test]
fn memory_usage_counts_the_owner() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "short", "o", 60_000, &[]).expect("granted");
    acquire(&mut con, "long", &"o".repeat(200), 60_000, &[]).expect("granted");
    let usage = |con: &mut Connection, key: &str| -> i64 {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query(con)
            .expect("MEMORY USAGE")
    };
    let short = usage(&mut con, "short");
    let long = usage(&mut con, "long");
    assert!(short > 0);
    assert!(long - short >= 199, "{short} then {long}");
}

#[test]
fn digest_covers_every_field_and_survives_reload() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let digest = |con: &mut Connection| -> Value { call(con, &["DEBUG", "DIGEST-VALUE", "k"]) };
    acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    let one_hold = digest(&mut con);
    acquire(&mut con, "k", "alice", 60_000, &["REENTRANT"]).expect("re-entered");
    let two_holds = digest(&mut con);
    assert_ne!(one_hold, two_holds, "holds are in the digest");
    call(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(digest(&mut con), two_holds);
}

#[test]
fn an_rdb_written_by_0_1_0_still_loads() {
    // Saved by leasehold 0.1.0 on Redis 7.0 (RDB encoding version 1): a lock held twice by
    // `owner-from-0.1.0`, made persistent, and the counter as auxiliary data.
    let mut server = Server::start(&[]);
    server.shutdown("NOSAVE");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/leasehold-0.1.0.rdb");
    std::fs::copy(fixture, server.dir().join("dump.rdb")).expect("the 0.1.0 RDB");
    server.restart();
    let mut con = server.client();
    let old_token = 1_795_406_499_228_000;
    assert_eq!(
        lock_info(&mut con, "old-lock"),
        Some(("owner-from-0.1.0".into(), old_token, -1, 2, 0))
    );
    let next = acquire(&mut con, "new-lock", "someone", 1_000, &[]).expect("granted");
    assert!(next > old_token);
}

/// The RESP encoding of one command, as an AOF holds it.
fn resp(args: &[&str]) -> String {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    out
}

/// Starts the stopped `server` with `commands` as its AOF (single-file, as Redis 6 and earlier
/// kept it, which Redis 7 and later load and turn into a multi-part AOF), and connects.
fn replay_aof(server: &mut Server, commands: &[Vec<&str>]) -> Connection {
    let aof: String = commands.iter().map(|command| resp(command)).collect();
    std::fs::write(server.dir().join("appendonly.aof"), aof).expect("the AOF");
    server.restart_with(&["--appendonly", "yes"]);
    server.client()
}

#[test]
fn an_aof_with_the_effects_of_older_releases_still_replays() {
    // Every effect form that 0.1.0 and 0.2.0 wrote, in a single-file AOF as Redis 6 and
    // earlier kept it (which Redis 7 and later load, then turn into a multi-part AOF). This
    // release sends holdings packed; these must still apply.
    let mut server = Server::start(&[]);
    server.shutdown("NOSAVE");
    let deadline = (common::now_ms() + 600_000).to_string();
    let base: i64 = 1_795_406_499_228_000;
    let token = |n: i64| (base + n).to_string();
    let mut con = replay_aof(
        &mut server,
        &[
            vec!["SELECT", "0"],
            // 0.1.0: an exclusive holding with PXAT.
            vec![
                "LOCK.APPLY",
                "x1",
                "alice",
                &token(1),
                "2",
                "PXAT",
                &deadline,
            ],
            // 0.2.0: an exclusive holding with its deadline, and one that keeps its lease.
            vec!["LOCK.APPLY", "x2", "bob", &token(2), "1", &deadline],
            vec!["LOCK.APPLY", "x4", "erin", &token(6), "1"],
            vec!["PEXPIREAT", "x4", &deadline],
            // 0.2.0: shared holders, one of which leaves.
            vec![
                "LOCK.APPLY",
                "x3",
                "carol",
                &token(3),
                "1",
                &deadline,
                "SHARED",
                "3",
            ],
            vec![
                "LOCK.APPLY",
                "x3",
                "dave",
                &token(4),
                "1",
                &deadline,
                "SHARED",
                "3",
            ],
            vec!["LOCK.APPLY", "x3", "carol", "DROP"],
        ],
    );
    let holding =
        |con: &mut Connection, key| lock_info(con, key).map(|info| (info.0, info.1, info.3));
    assert_eq!(holding(&mut con, "x1"), Some(("alice".into(), base + 1, 2)));
    assert_eq!(holding(&mut con, "x2"), Some(("bob".into(), base + 2, 1)));
    assert_eq!(holding(&mut con, "x4"), Some(("erin".into(), base + 6, 1)));
    assert!(
        lock_info(&mut con, "x4").is_some_and(|info| info.2 > 500_000),
        "its lease"
    );
    let shared = common::shared_info(&mut con, "x3").expect("x3");
    assert_eq!((shared.holders, shared.limit), (1, 3));
    assert_eq!(
        shared.owners.first().map(|o| (o.0.as_str(), o.1)),
        Some(("dave", base + 4))
    );
    let next = acquire(&mut con, "new", "someone", 1_000, &[]).expect("granted");
    assert!(next > base + 6, "the counter saw every token");
}

#[test]
fn an_aof_with_effects_no_master_sends_loads_the_rest() {
    // A damaged or crafted AOF: effects beyond a semaphore's limit, with a token of 0, a
    // deadline of 0, a shared holding without one. Each is refused with a logged error and
    // changes nothing; the rest of the file loads.
    let mut server = Server::start(&[]);
    server.shutdown("NOSAVE");
    let deadline = (common::now_ms() + 600_000).to_string();
    let token: i64 = 1_795_406_499_228_000;
    let (first, second) = (token.to_string(), (token + 1).to_string());
    let mut con = replay_aof(
        &mut server,
        &[
            vec!["SELECT", "0"],
            vec![
                "LOCK.APPLY",
                "s",
                "a",
                &first,
                "1",
                &deadline,
                "SHARED",
                "1",
            ],
            vec![
                "LOCK.APPLY",
                "s",
                "b",
                &second,
                "1",
                &deadline,
                "SHARED",
                "1",
            ],
            vec!["LOCK.APPLY", "x", "a", "0", "1", &deadline],
            vec!["LOCK.APPLY", "y", "a", &first, "1", "0"],
            vec!["LOCK.APPLY", "z", "a", &first, "1", "SHARED", "3"],
            vec!["SET", "after", "1"],
        ],
    );
    let shared = common::shared_info(&mut con, "s").expect("s");
    assert_eq!((shared.holders, shared.limit), (1, 1), "{shared:?}");
    for key in ["x", "y", "z"] {
        assert_eq!(call(&mut con, &["EXISTS", key]), Value::Int(0), "{key}");
    }
    assert_eq!(
        call(&mut con, &["GET", "after"]),
        Value::BulkString(b"1".to_vec())
    );
    let log = server.log();
    assert!(log.contains("more holders than its LIMIT"), "{log}");
    assert!(
        log.contains("invalid lease deadline in LOCK.APPLY"),
        "{log}"
    );
}
