//! Being a good citizen of the server: `COMMAND DOCS`/`COMMAND INFO`, ACL categories and key
//! patterns, the `INFO lock` counters, and the `lock.max-ttl-ms` configuration.

mod common;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use common::{Server, acquire, call, error, wait_until};
use redis::{Connection, Value};

/// A RESP2 reply of alternating names and values as a map, names as text.
fn pairs(value: &Value) -> HashMap<String, Value> {
    let Value::Array(items) = value else {
        panic!("not a flat map: {value:?}");
    };
    items
        .chunks(2)
        .map(|pair| (text(&pair[0]), pair[1].clone()))
        .collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("not text: {other:?}"),
    }
}

fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) | Value::Set(items) => items.iter().map(text).collect(),
        other => panic!("not a list: {other:?}"),
    }
}

/// True on servers with module ACL categories (Redis 7.2+, Valkey).
fn has_module_acl_categories(con: &mut Connection) -> bool {
    redis::cmd("ACL")
        .arg("CAT")
        .arg("lock")
        .query::<Vec<String>>(con)
        .is_ok()
}

#[test]
fn command_docs_describe_every_command() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let per_holder = "O(1) for an exclusive lock, O(log N) for a shared lock with N holders";
    let set = "O(K) for K keys, plus the hand-over to each freed lock's waiters";
    let expected: [(&str, &[&str], &str); 9] = [
        (
            "lock.acquire",
            &[
                "key",
                "owner",
                "ttl-ms",
                "reentrant",
                "timeout-ms",
                "shared",
                "id",
                "sync",
            ],
            per_holder,
        ),
        ("lock.release", &["key", "owner"], per_holder),
        (
            "lock.renew",
            &["key", "owner", "ttl-ms", "id", "sync"],
            per_holder,
        ),
        ("lock.fence", &["key", "owner"], "O(1)"),
        (
            "lock.info",
            &["key"],
            "O(1) for an exclusive lock, O(N) for a shared lock with N holders",
        ),
        (
            "lock.raise",
            &["key", "owner", "token"],
            "O(1) for an exclusive lock, O(log N) for a shared lock with N holders when the token becomes its largest, O(N) otherwise",
        ),
        (
            "lock.macquire",
            &[
                "numkeys",
                "key",
                "owner",
                "ttl-ms",
                "timeout-ms",
                "id",
                "sync",
            ],
            set,
        ),
        ("lock.mrelease", &["numkeys", "key", "owner"], set),
        (
            "lock.mrenew",
            &["numkeys", "key", "owner", "ttl-ms", "id", "sync"],
            "O(K) for K keys",
        ),
    ];
    for (command, arguments, complexity) in expected {
        let docs = call(&mut con, &["COMMAND", "DOCS", command]);
        let docs = pairs(&docs);
        let doc = pairs(
            docs.get(command)
                .unwrap_or_else(|| panic!("{command}: no docs")),
        );
        assert!(text(&doc["summary"]).len() > 20, "{command}: summary");
        let since = match command {
            "lock.raise" => "0.2.0",
            "lock.macquire" | "lock.mrelease" | "lock.mrenew" => "0.4.0",
            _ => "0.1.0",
        };
        assert_eq!(text(&doc["since"]), since, "{command}: since");
        assert_eq!(text(&doc["group"]), "module", "{command}: group");
        assert_eq!(
            text(&doc["complexity"]),
            complexity,
            "{command}: complexity"
        );
        let Value::Array(args) = &doc["arguments"] else {
            panic!("{command}: arguments");
        };
        let names: Vec<String> = args.iter().map(|arg| text(&pairs(arg)["name"])).collect();
        assert_eq!(names, arguments, "{command}: arguments");
    }
}

/// Every command of `commands/` has its docs and key specs on the server: the server refuses
/// a command's whole info for one bad field (logging it), which no other test would see.
#[test]
fn the_server_takes_every_commands_info() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let files =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/commands")).expect("commands/");
    for file in files {
        let path = file.expect("a file").path();
        let command = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let docs = pairs(&call(&mut con, &["COMMAND", "DOCS", &command]));
        let doc = pairs(
            docs.get(&command)
                .unwrap_or_else(|| panic!("no docs for {command}")),
        );
        assert!(doc.contains_key("summary"), "{command}: {doc:?}");
    }
    assert!(
        !server.log().contains("Invalid command info"),
        "{}",
        server.log()
    );
}

#[test]
fn command_docs_describe_shared_and_limit_as_a_block() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let docs = pairs(&call(&mut con, &["COMMAND", "DOCS", "lock.acquire"]));
    let doc = pairs(&docs["lock.acquire"]);
    let Value::Array(args) = &doc["arguments"] else {
        panic!("arguments");
    };
    let shared = pairs(&args[5]);
    assert_eq!(
        (
            text(&shared["name"]),
            text(&shared["type"]),
            text(&shared["token"])
        ),
        ("shared".into(), "block".into(), "SHARED".into())
    );
    assert_eq!(text(&shared["since"]), "0.2.0");
    assert_eq!(texts(&shared["flags"]), ["optional"]);
    let Value::Array(inner) = &shared["arguments"] else {
        panic!("the block's arguments: {shared:?}");
    };
    let limit = pairs(&inner[0]);
    assert_eq!(
        (
            text(&limit["name"]),
            text(&limit["type"]),
            text(&limit["token"])
        ),
        ("limit".into(), "integer".into(), "LIMIT".into())
    );
}

#[test]
fn command_info_gives_arity_flags_and_key_specs() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let expected = [
        (
            "lock.acquire",
            -4,
            &["write", "denyoom", "blocking"][..],
            "RW",
        ),
        ("lock.release", 3, &["write", "fast"], "RW"),
        ("lock.renew", -4, &["write", "fast"], "RW"),
        ("lock.fence", -2, &["readonly", "fast"], "RO"),
        ("lock.info", 2, &["readonly", "fast"], "RO"),
        ("lock.raise", 4, &["write", "fast"], "RW"),
    ];
    for (command, arity, flags, access) in expected {
        let Value::Array(info) = call(&mut con, &["COMMAND", "INFO", command]) else {
            panic!("{command}: COMMAND INFO");
        };
        let Value::Array(info) = &info[0] else {
            panic!("{command}: unknown");
        };
        assert_eq!(text(&info[0]), command);
        assert_eq!(info[1], Value::Int(arity), "{command}: arity");
        let command_flags = texts(&info[2]);
        for flag in flags {
            assert!(
                command_flags.contains(&(*flag).to_owned()),
                "{command}: {command_flags:?}"
            );
        }
        assert_eq!(
            &info[3..6],
            &[Value::Int(1), Value::Int(1), Value::Int(1)],
            "{command}: keys"
        );
        let Value::Array(key_specs) = &info[8] else {
            panic!("{command}: key specs");
        };
        let spec_flags = texts(&pairs(&key_specs[0])["flags"]);
        assert_eq!(spec_flags[0], access, "{command}: key spec {spec_flags:?}");
    }
}

#[test]
fn acl_key_patterns_apply_to_lock_names() {
    let server = Server::start(&[]);
    let mut con = server.client();
    call(
        &mut con,
        &["ACL", "SETUSER", "app", "on", "nopass", "~app:*", "+@all"],
    );
    call(&mut con, &["AUTH", "app", "any"]);
    assert!(acquire(&mut con, "app:order:1", "me", 1_000, &[]).is_some());
    let refused = error(&mut con, &["LOCK.ACQUIRE", "other:order:1", "me", "1000"]);
    assert!(refused.starts_with("NOPERM"), "{refused}");
    assert!(error(&mut con, &["LOCK.FENCE", "other:order:1"]).starts_with("NOPERM"));
}

#[test]
fn a_read_only_user_can_fence_and_inspect_but_not_acquire() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "owner", 60_000, &[]).expect("granted");
    // Redis 7.0 has no module ACL categories: grant the read commands by name there.
    let mut rules = vec!["SETUSER", "reader", "on", "nopass", "~*", "+@read"];
    if !has_module_acl_categories(&mut con) {
        rules.extend(["+lock.fence", "+lock.info"]);
    }
    let mut acl = vec!["ACL"];
    acl.extend(rules);
    call(&mut con, &acl);
    call(&mut con, &["AUTH", "reader", "any"]);
    assert!(matches!(
        call(&mut con, &["LOCK.FENCE", "k"]),
        Value::Int(_)
    ));
    assert!(matches!(
        call(&mut con, &["LOCK.INFO", "k"]),
        Value::Array(_)
    ));
    for write in [
        &["LOCK.ACQUIRE", "k", "me", "1000"][..],
        &["LOCK.RELEASE", "k", "owner"],
        &["LOCK.RENEW", "k", "owner", "1000"],
    ] {
        assert!(error(&mut con, write).starts_with("NOPERM"), "{write:?}");
    }
}

#[test]
fn the_lock_acl_category_covers_every_command_where_supported() {
    let server = Server::start(&[]);
    let mut con = server.client();
    if !has_module_acl_categories(&mut con) {
        return; // Redis 7.0: module commands cannot join ACL categories.
    }
    let mut members = texts(&call(&mut con, &["ACL", "CAT", "lock"]));
    members.sort();
    assert_eq!(
        members,
        [
            "lock.acquire",
            "lock.apply",
            "lock.campaign",
            "lock.fence",
            "lock.fenced",
            "lock.guard",
            "lock.info",
            "lock.insync",
            "lock.leader",
            "lock.macquire",
            "lock.mrelease",
            "lock.mrenew",
            "lock.observe",
            "lock.proclaim",
            "lock.promotable",
            "lock.raise",
            "lock.refused",
            "lock.release",
            "lock.renew",
            "lock.replconf",
            "lock.resign",
            "lock.session",
            "lock.sync"
        ]
    );
    call(
        &mut con,
        &["ACL", "SETUSER", "locker", "on", "nopass", "~*", "+@lock"],
    );
    call(&mut con, &["AUTH", "locker", "any"]);
    assert!(acquire(&mut con, "k", "me", 1_000, &[]).is_some());
    assert!(error(&mut con, &["GET", "k"]).starts_with("NOPERM"));
}

fn stats(con: &mut Connection) -> HashMap<String, i64> {
    let info: String = redis::cmd("INFO")
        .arg("lock")
        .query(con)
        .expect("INFO lock");
    info.lines()
        .filter_map(|line| line.split_once(':'))
        .filter_map(|(name, value)| {
            Some((
                name.strip_prefix("lock_")?.to_owned(),
                value.trim().parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn info_lock_counts_what_a_user_would_graph() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let first = acquire(&mut con, "k", "a", 60_000, &[]).expect("granted");
    acquire(&mut con, "k", "b", 60_000, &[]); // contended
    call(&mut con, &["LOCK.RENEW", "k", "a", "60000"]);
    let mut waiter = server.client();
    let waiting = thread::spawn(move || acquire(&mut waiter, "k", "w", 60_000, &["WAIT", "0"]));
    wait_until("a waiter", || stats(&mut con)["waiters"] == 1);
    call(&mut con, &["LOCK.RELEASE", "k", "a"]);
    let handed = waiting.join().expect("waiter").expect("granted");
    let expiring = acquire(&mut con, "short", "s", 20, &[]).expect("granted");
    thread::sleep(Duration::from_millis(60));
    assert_eq!(
        call(&mut con, &["EXISTS", "short"]),
        Value::Int(0),
        "expired"
    );
    // A shared holder's lease ends while another holds on.
    acquire(&mut con, "rw", "brief", 20, &["SHARED"]).expect("granted");
    acquire(&mut con, "rw", "long", 60_000, &["SHARED"]).expect("granted");
    wait_until("the brief lease ends", || {
        call(&mut con, &["LOCK.FENCE", "rw", "brief"]) == Value::Nil
            && stats(&mut con)["expired_leases"] == 2
    });
    // Neither a deleted lock nor a string that expires where a released lock was is a lease.
    acquire(&mut con, "gone", "g", 60_000, &[]).expect("granted");
    call(&mut con, &["DEL", "gone"]);
    acquire(&mut con, "reused", "r", 60_000, &[]).expect("granted");
    call(&mut con, &["LOCK.RELEASE", "reused", "r"]);
    call(&mut con, &["SET", "reused", "x", "PX", "20"]);
    thread::sleep(Duration::from_millis(60));
    assert_eq!(call(&mut con, &["EXISTS", "reused"]), Value::Int(0));

    let stats = stats(&mut con);
    assert_eq!(stats["acquisitions"], 7, "{stats:?}");
    assert_eq!(
        stats["contended_acquisitions"], 2,
        "the plain one and the waiter"
    );
    assert_eq!(stats["releases"], 2);
    assert_eq!(stats["renewals"], 1);
    assert_eq!(stats["waiters"], 0);
    assert_eq!(stats["handovers"], 1);
    assert!(stats["last_token"] > expiring);
    assert!(expiring > handed && handed > first);
    assert_eq!(
        stats["expired_leases"], 2,
        "the short lock and the brief holder"
    );
}

#[test]
fn max_ttl_is_set_at_load_enforced_and_changed_with_config_set() {
    let server = Server::with_module_args(&["max-ttl-ms", "1000"], &[]);
    let mut con = server.client();
    assert_eq!(
        call(&mut con, &["CONFIG", "GET", "lock.max-ttl-ms"]),
        Value::Array(vec![
            Value::BulkString(b"lock.max-ttl-ms".to_vec()),
            Value::BulkString(b"1000".to_vec())
        ])
    );
    let capped = "ERR ttl-ms exceeds lock.max-ttl-ms (1000)";
    assert_eq!(error(&mut con, &["LOCK.ACQUIRE", "k", "a", "1001"]), capped);
    acquire(&mut con, "k", "a", 1_000, &[]).expect("at the cap");
    assert_eq!(error(&mut con, &["LOCK.RENEW", "k", "a", "5000"]), capped);
    for bad in ["-1", "ten", ""] {
        let refused = error(&mut con, &["CONFIG", "SET", "lock.max-ttl-ms", bad]);
        assert!(refused.starts_with("ERR"), "{bad}: {refused}");
    }
    call(&mut con, &["CONFIG", "SET", "lock.max-ttl-ms", "0"]);
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "a", "86400000"]),
        Value::Int(1),
        "0: no cap"
    );
}

#[test]
fn a_bad_max_ttl_at_load_keeps_the_server_from_starting() {
    for (config, bad) in [
        ("max-ttl-ms", "-5"),
        ("max-ttl-ms", "soon"),
        ("max-multi-keys", "0"),
        ("max-multi-keys", "100001"),
    ] {
        let log = Server::refused(&[config, bad]);
        assert!(
            log.contains("Module") || log.contains("module"),
            "{bad}: {log}"
        );
    }
}

#[test]
fn module_load_on_a_running_server_takes_its_arguments() {
    let server = Server::without_module(&["--enable-module-command", "yes"]);
    let mut con = server.client();
    let path = common::module_path();
    let path = path.to_string_lossy();
    assert_eq!(
        call(&mut con, &["MODULE", "LOAD", &path, "max-ttl-ms", "500"]),
        Value::Okay
    );
    assert_eq!(
        error(&mut con, &["LOCK.ACQUIRE", "k", "a", "501"]),
        "ERR ttl-ms exceeds lock.max-ttl-ms (500)"
    );
    assert!(acquire(&mut con, "k", "a", 500, &[]).is_some());
}
