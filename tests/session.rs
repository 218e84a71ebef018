//! Sessions on real servers: holdings tied to a connection pass on a grace after it closes.
//!
//! - A holder process killed with `kill -9`: the waiter already blocked is granted within the
//!   grace plus 100 ms (and not before the grace), with a larger token, replicated.
//! - `CLIENT KILL` of the session's connection and an `ATTACH` within the grace: nothing is
//!   handed over; `CLOSE` then frees at once.
//! - Every hold of a reentrant holding, shared holdings and sets end with the session; a release
//!   or an acquire without the session unties a holding; `RENEW ... SESSION` ties it again.
//! - A session ends only the holdings that still keep its number: not one another session or a
//!   plain acquire took over, nor one `RENAME` or `COPY` put under a name it did not log;
//!   renewals and retries log nothing more.
//! - A holding released, deleted, expired, untied or not granted leaves no log entry behind.
//! - A connection that uses a session (`USE`) ties what it takes and renews without naming it,
//!   until `USE NONE` or another `SESSION`; closing it detaches nothing; once the session ended
//!   its commands are refused, not granted untied.
//! - A tie whose holding is gone without a release (its lease ended, its key was deleted) is
//!   swept; a live one stays.
//! - Bad input is refused and changes nothing; a replica refuses sessions.
//! - A failover: the new master has the holdings' leases only.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{
    Server, acquire, call, error, granted, holder, info_field, info_fields, promote, queued,
    shared_info, wait_for, wait_until, wait_with,
};
use redis::{Connection, Value};

/// The grace of most tests, in ms.
const GRACE_MS: u64 = 500;

/// `LOCK.SESSION OPEN GRACE grace_ms` on `con`: the session's id.
fn open(con: &mut Connection, grace_ms: u64) -> String {
    let (id, grace): (String, u64) = redis::cmd("LOCK.SESSION")
        .arg("OPEN")
        .arg("GRACE")
        .arg(grace_ms)
        .query(con)
        .expect("LOCK.SESSION OPEN");
    assert_eq!(grace, grace_ms);
    assert_eq!(id.len(), 16, "{id}");
    id
}

/// `LOCK.INFO key`'s `session` field.
fn session_of(con: &mut Connection, key: &str) -> Option<String> {
    match info_fields(con, key)?.remove("session")? {
        Value::BulkString(id) => Some(String::from_utf8(id).expect("an id")),
        Value::Nil => None,
        other => panic!("session: {other:?}"),
    }
}

#[test]
fn a_holder_killed_with_kill_9_hands_over_within_the_grace_plus_100_ms() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    let command = "LOCK.ACQUIRE order crashed-holder 30000";
    let (mut holder_child, held) = common::session_process(master.port, GRACE_MS, command);
    assert_eq!(holder(&mut m, "order").as_deref(), Some("crashed-holder"));
    assert!(session_of(&mut m, "order").is_some());
    let waiter = wait_for(&master, "order", "next", 0);
    queued(&mut m, "order", 1);

    let killed = Instant::now();
    holder_child.kill().expect("kill -9");
    holder_child.wait().expect("reaped");
    let token = granted(waiter);
    let elapsed = killed.elapsed();
    assert!(token > held, "{token} after {held}");
    assert!(
        elapsed >= Duration::from_millis(GRACE_MS - 20)
            && elapsed <= Duration::from_millis(GRACE_MS + 100),
        "handed over {elapsed:?} after the kill, grace {GRACE_MS} ms"
    );
    assert_eq!(
        info_field(&mut m, "lock", "lock_sessions_expired").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut m, "lock", "lock_session_releases").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut m, "lock", "lock_sessions").as_deref(),
        Some("0")
    );

    // The release and the hand-over reached the replica like any.
    common::sync_replicas(&mut m);
    assert_eq!(
        holder(&mut replica.client(), "order").as_deref(),
        Some("next")
    );
}

#[test]
fn a_connection_killed_and_attached_again_within_the_grace_hands_nothing_over() {
    let server = Server::start(&[]);
    let mut session_con = server.client();
    let id = open(&mut session_con, GRACE_MS);
    let session_client: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut session_con)
        .expect("id");
    let mut con = server.client();
    acquire(&mut con, "order", "alice", 30_000, &["SESSION", &id]).expect("granted");
    let waiter = wait_for(&server, "order", "bob", 0);
    queued(&mut con, "order", 1);

    let id_text = session_client.to_string();
    call(&mut con, &["CLIENT", "KILL", "ID", &id_text]);
    wait_until("the session is detached", || {
        info_field(&mut con, "lock", "lock_sessions_detached").as_deref() == Some("1")
    });
    thread::sleep(Duration::from_millis(GRACE_MS / 2));
    let mut again = server.client();
    let grace: i64 = redis::cmd("LOCK.SESSION")
        .arg("ATTACH")
        .arg(&id)
        .query(&mut again)
        .expect("attached");
    assert_eq!(grace, GRACE_MS as i64);
    thread::sleep(Duration::from_millis(GRACE_MS + 300));
    assert_eq!(
        holder(&mut con, "order").as_deref(),
        Some("alice"),
        "handed over on a blip"
    );
    assert_eq!(session_of(&mut con, "order"), Some(id.clone()));
    assert!(!waiter.reply.is_finished());

    // A close frees at once.
    let closed = Instant::now();
    assert_eq!(
        call(&mut again, &["LOCK.SESSION", "CLOSE", &id]),
        Value::Int(1)
    );
    granted(waiter);
    assert!(closed.elapsed() < Duration::from_millis(GRACE_MS));
    assert_eq!(holder(&mut con, "order").as_deref(), Some("bob"));
    assert!(error(&mut again, &["LOCK.SESSION", "ATTACH", &id]).contains("no such session"));
}

#[test]
fn a_session_ends_every_kind_of_holding_and_only_what_is_still_tied() {
    let server = Server::start(&[]);
    let mut session_con = server.client();
    let id = open(&mut session_con, 60_000);
    let mut con = server.client();
    let with = ["SESSION", id.as_str()];
    // Three holds of a reentrant holding, a shared one beside another reader, a set.
    for _ in 0..3 {
        acquire(
            &mut con,
            "reentrant",
            "alice",
            30_000,
            &["REENTRANT", "SESSION", &id],
        )
        .expect("held");
    }
    acquire(
        &mut con,
        "shared",
        "alice",
        30_000,
        &["SHARED", "SESSION", &id],
    )
    .expect("held");
    acquire(&mut con, "shared", "reader", 30_000, &["SHARED"]).expect("held");
    call(
        &mut con,
        &[
            "LOCK.MACQUIRE",
            "2",
            "a",
            "b",
            "alice",
            "30000",
            "SESSION",
            &id,
        ],
    );
    // Untied: released, or taken again without the session.
    acquire(&mut con, "released", "alice", 30_000, &with).expect("held");
    call(&mut con, &["LOCK.RELEASE", "released", "alice"]);
    acquire(&mut con, "released", "alice", 30_000, &[]).expect("held again, untied");
    assert_eq!(session_of(&mut con, "released"), None);
    acquire(&mut con, "retied", "alice", 30_000, &[]).expect("held");
    assert_eq!(
        call(
            &mut con,
            &["LOCK.RENEW", "retied", "alice", "30000", "SESSION", &id]
        ),
        Value::Int(1)
    );
    assert_eq!(session_of(&mut con, "retied"), Some(id.clone()));

    // reentrant, shared, a, b, retied.
    assert_eq!(
        call(&mut con, &["LOCK.SESSION", "CLOSE", &id]),
        Value::Int(5)
    );
    for key in ["reentrant", "a", "b", "retied"] {
        assert_eq!(holder(&mut con, key), None, "{key}");
    }
    let readers = shared_info(&mut con, "shared").expect("the other reader holds it");
    let owners: Vec<&str> = readers
        .owners
        .iter()
        .map(|owner| owner.0.as_str())
        .collect();
    assert_eq!(owners, ["reader"]);
    assert_eq!(holder(&mut con, "released").as_deref(), Some("alice"));
}

#[test]
fn a_session_ends_only_the_holdings_that_still_keep_its_number() {
    let server = Server::start(&[]);
    let (mut first_con, mut second_con) = (server.client(), server.client());
    let first = open(&mut first_con, 60_000);
    let second = open(&mut second_con, 60_000);
    let mut con = server.client();
    let with = |id: &str| ["SESSION".to_owned(), id.to_owned()];
    let take = |con: &mut Connection, key: &str, id: &str| {
        let with = with(id);
        let with: Vec<&str> = with.iter().map(String::as_str).collect();
        acquire(con, key, "alice", 30_000, &with).expect("held");
    };
    take(&mut con, "renewed", &first);
    for _ in 0..5 {
        take(&mut con, "renewed", &first);
        let renew = ["LOCK.RENEW", "renewed", "alice", "30000", "SESSION", &first];
        assert_eq!(call(&mut con, &renew), Value::Int(1));
    }
    let ties = |con: &mut Connection| info_field(con, "lock", "lock_session_ties");
    assert_eq!(ties(&mut con).as_deref(), Some("1"), "logged once");
    take(&mut con, "taken-over", &first);
    take(&mut con, "taken-over", &second);
    assert_eq!(session_of(&mut con, "taken-over"), Some(second.clone()));
    take(&mut con, "renamed", &first);
    call(&mut con, &["RENAME", "renamed", "elsewhere"]);
    assert_eq!(session_of(&mut con, "elsewhere"), None, "its lease only");
    take(&mut con, "copied", &first);
    call(&mut con, &["COPY", "copied", "copy"]);
    assert_eq!(session_of(&mut con, "copy"), None);
    assert_eq!(session_of(&mut con, "copied"), Some(first.clone()));
    take(&mut con, "moved-back", &first);
    call(&mut con, &["RENAME", "moved-back", "away"]);
    call(&mut con, &["RENAME", "away", "moved-back"]);
    take(&mut con, "moved-back", &first);
    assert_eq!(
        session_of(&mut con, "moved-back"),
        Some(first.clone()),
        "tied again"
    );

    // renewed, copied, moved-back.
    assert_eq!(
        call(&mut con, &["LOCK.SESSION", "CLOSE", &first]),
        Value::Int(3)
    );
    for key in ["renewed", "copied", "moved-back"] {
        assert_eq!(holder(&mut con, key), None, "{key}");
    }
    for key in ["taken-over", "elsewhere", "copy"] {
        assert_eq!(holder(&mut con, key).as_deref(), Some("alice"), "{key}");
    }
}

#[test]
fn a_holding_that_ends_or_is_untied_leaves_nothing_in_the_sessions_log() {
    let server = Server::start(&[]);
    let mut session_con = server.client();
    let id = open(&mut session_con, 60_000);
    let mut con = server.client();
    let with = ["SESSION", id.as_str()];
    let ties = |con: &mut Connection| info_field(con, "lock", "lock_session_ties");
    for n in 0..100 {
        let key = format!("churn:{n}");
        acquire(&mut con, &key, "alice", 30_000, &with).expect("held");
        assert_eq!(
            call(&mut con, &["LOCK.RELEASE", &key, "alice"]),
            Value::Int(1)
        );
    }
    assert_eq!(ties(&mut con).as_deref(), Some("0"), "released");
    acquire(&mut con, "deleted", "alice", 30_000, &with).expect("held");
    call(&mut con, &["DEL", "deleted"]);
    acquire(&mut con, "untied", "alice", 30_000, &with).expect("held");
    acquire(&mut con, "untied", "alice", 30_000, &[]).expect("held again");
    acquire(&mut con, "busy", "bob", 30_000, &[]).expect("held");
    assert_eq!(acquire(&mut con, "busy", "alice", 30_000, &with), None);
    assert_eq!(
        ties(&mut con).as_deref(),
        Some("0"),
        "deleted, untied, not granted"
    );
    acquire(&mut con, "expired", "alice", 100, &with).expect("held");
    wait_until("the expired key's entry is freed", || {
        ties(&mut con).as_deref() == Some("0")
    });
}

#[test]
fn a_connection_that_uses_a_session_ties_what_it_takes_without_naming_it() {
    let server = Server::start(&[]);
    let (mut session_con, mut other_con) = (server.client(), server.client());
    let id = open(&mut session_con, 60_000);
    let other = open(&mut other_con, 60_000);
    let mut con = server.client();
    let connections = |con: &mut Connection| info_field(con, "lock", "lock_session_connections");
    assert_eq!(call(&mut con, &["LOCK.SESSION", "USE", &id]), Value::Okay);
    assert_eq!(connections(&mut con).as_deref(), Some("1"));
    acquire(&mut con, "a", "alice", 30_000, &[]).expect("held");
    call(
        &mut con,
        &["LOCK.MACQUIRE", "2", "b", "c", "alice", "30000"],
    );
    acquire(&mut server.client(), "d", "alice", 30_000, &[]).expect("held, untied");
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "d", "alice", "30000"]),
        Value::Int(1)
    );
    acquire(&mut con, "e", "alice", 30_000, &["SESSION", &other]).expect("held");
    for (key, session) in [
        ("a", &id),
        ("b", &id),
        ("c", &id),
        ("d", &id),
        ("e", &other),
    ] {
        assert_eq!(session_of(&mut con, key).as_ref(), Some(session), "{key}");
    }
    // RESET leaves it (Redis tells modules nothing of it); USE NONE stops it.
    assert_eq!(
        call(&mut con, &["RESET"]),
        Value::SimpleString("RESET".into())
    );
    acquire(&mut con, "e2", "alice", 30_000, &[]).expect("held");
    assert_eq!(session_of(&mut con, "e2").as_ref(), Some(&id));
    assert_eq!(
        call(&mut con, &["LOCK.SESSION", "USE", "none"]),
        Value::Okay
    );
    acquire(&mut con, "f", "alice", 30_000, &[]).expect("held");
    assert_eq!(session_of(&mut con, "f"), None);

    // A connection that used the session closing detaches nothing.
    let mut user = server.client();
    call(&mut user, &["LOCK.SESSION", "USE", &id]);
    drop(user);
    wait_until("the closed connection forgotten", || {
        connections(&mut con).as_deref() == Some("0")
    });
    assert_eq!(
        info_field(&mut con, "lock", "lock_sessions_detached").as_deref(),
        Some("0")
    );

    // Once the session ended: refused, until the connection uses another.
    call(&mut con, &["LOCK.SESSION", "USE", &id]);
    assert_eq!(
        call(&mut session_con, &["LOCK.SESSION", "CLOSE", &id]),
        Value::Int(5)
    );
    for args in [
        &["LOCK.ACQUIRE", "g", "alice", "30000"][..],
        &["LOCK.RENEW", "e", "alice", "30000"],
        &["LOCK.MACQUIRE", "1", "g", "alice", "30000"],
        &["LOCK.MRENEW", "1", "e", "alice", "30000"],
    ] {
        assert!(
            error(&mut con, args).contains("no such session"),
            "{args:?}"
        );
    }
    assert_eq!(holder(&mut con, "g"), None);
    assert_eq!(session_of(&mut con, "e"), Some(other.clone()), "unchanged");
    call(&mut con, &["LOCK.SESSION", "USE", &other]);
    acquire(&mut con, "g", "alice", 30_000, &[]).expect("held");
    assert_eq!(session_of(&mut con, "g"), Some(other));
}

#[test]
fn ties_whose_holdings_are_gone_are_swept_and_live_ones_kept() {
    let server = Server::start(&[]);
    let mut session_con = server.client();
    let id = open(&mut session_con, 60_000);
    let mut con = server.client();
    let ties = |con: &mut Connection| info_field(con, "lock", "lock_session_ties");
    // Leases that end unreleased, and a key deleted: gone without a release (looked up once
    // the lease end they asked for has passed).
    for n in 0..500 {
        acquire(
            &mut con,
            &format!("short:{n}"),
            "alice",
            100,
            &["SESSION", &id],
        )
        .expect("held");
    }
    acquire(&mut con, "deleted", "alice", 1_000, &["SESSION", &id]).expect("held");
    call(&mut con, &["DEL", "deleted"]);
    acquire(&mut con, "live", "alice", 60_000, &["SESSION", &id]).expect("held");
    // A waiter's tie, made when it queued: kept until it is granted.
    acquire(&mut con, "queued", "bob", 60_000, &[]).expect("held");
    let waiting = wait_with(&server, "queued", "alice", 0, &["SESSION", &id]);
    queued(&mut con, "queued", 1);
    wait_until("the sweep untied the holdings that are gone", || {
        ties(&mut con).as_deref() == Some("2")
    });
    thread::sleep(Duration::from_millis(300)); // more sweeps: the waiter's tie stays
    call(&mut con, &["LOCK.RELEASE", "queued", "bob"]);
    granted(waiting);
    for key in ["live", "queued"] {
        assert_eq!(session_of(&mut con, key), Some(id.clone()), "{key}");
    }
    assert_eq!(
        call(&mut con, &["LOCK.SESSION", "CLOSE", &id]),
        Value::Int(2)
    );
    assert_eq!(ties(&mut con).as_deref(), Some("0"));
}

#[test]
fn help_lists_every_subcommand() {
    let server = Server::start(&[]);
    let help: Vec<String> = redis::cmd("LOCK.SESSION")
        .arg("HELP")
        .query(&mut server.client())
        .expect("HELP");
    for subcommand in ["OPEN", "ATTACH", "USE", "CLOSE", "HELP"] {
        assert!(
            help.iter().any(|line| line.starts_with(subcommand)),
            "{subcommand} in {help:?}"
        );
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    for (args, expected) in [
        (&["LOCK.SESSION"][..], "wrong number of arguments"),
        (
            &["LOCK.SESSION", "LIST"],
            "unknown subcommand 'LIST'. Try LOCK.SESSION HELP.",
        ),
        (
            &["LOCK.SESSION", "HELP", "OPEN"],
            "wrong number of arguments",
        ),
        (
            &["LOCK.SESSION", "OPEN", "GRACE", "99"],
            "grace-ms must be 100 to",
        ),
        (
            &["LOCK.SESSION", "OPEN", "GRACE", "60001"],
            "lock.session-max-grace-ms (60000)",
        ),
        (&["LOCK.SESSION", "OPEN", "FOREVER"], "syntax error"),
        (&["LOCK.SESSION", "ATTACH"], "wrong number of arguments"),
        (&["LOCK.SESSION", "ATTACH", "xyz"], "invalid session id"),
        (&["LOCK.SESSION", "USE"], "wrong number of arguments"),
        (&["LOCK.SESSION", "USE", "xyz"], "invalid session id"),
        (
            &["LOCK.SESSION", "USE", "00000000000000ab"],
            "no such session",
        ),
        (
            &["LOCK.SESSION", "CLOSE", "00000000000000ab"],
            "no such session",
        ),
        (
            &[
                "LOCK.ACQUIRE",
                "k",
                "o",
                "1000",
                "SESSION",
                "00000000000000ab",
            ],
            "no such session",
        ),
        (
            &["LOCK.ACQUIRE", "k", "o", "1000", "SESSION"],
            "syntax error",
        ),
        (
            &["LOCK.RENEW", "k", "o", "1000", "SESSION", "nope"],
            "invalid session id",
        ),
        (&["LOCK.RENEW", "k", "o", "1000", "EXTRA"], "syntax error"),
        (
            &[
                "LOCK.MACQUIRE",
                "1",
                "k",
                "o",
                "1000",
                "SESSION",
                "00000000000000ab",
            ],
            "no such session",
        ),
        (
            &["CONFIG", "SET", "lock.session-grace-ms", "50"],
            "lock.session-grace-ms",
        ),
        (
            &["EVAL", "return redis.call('LOCK.SESSION', 'OPEN')", "0"],
            "script",
        ),
    ] {
        let message = error(&mut con, args);
        assert!(message.contains(expected), "{args:?}: {message}");
    }
    assert_eq!(call(&mut con, &["DBSIZE"]), Value::Int(0));
    assert_eq!(
        info_field(&mut con, "lock", "lock_session_connections").as_deref(),
        Some("0")
    );

    // Another ACL user's session.
    let id = open(&mut con, GRACE_MS);
    call(
        &mut con,
        &["ACL", "SETUSER", "bob", "on", "nopass", "+@all", "~*"],
    );
    let mut bob = server.client();
    call(&mut bob, &["AUTH", "bob", "x"]);
    for args in [
        &["LOCK.SESSION", "ATTACH", id.as_str()][..],
        &["LOCK.SESSION", "CLOSE", id.as_str()],
    ] {
        assert!(
            error(&mut bob, args).contains("belongs to another user"),
            "{args:?}"
        );
    }
    // Bob may put a holding of his own in the session's hands: that gives him nothing of alice's.
    acquire(&mut bob, "k", "bob", 1_000, &["SESSION", &id]).expect("granted");

    let replica = Server::start(&[]);
    replica.replicate(&server);
    assert!(error(&mut replica.client(), &["LOCK.SESSION", "OPEN"]).starts_with("READONLY"));
}

#[test]
fn after_a_failover_the_holdings_keep_their_leases_only() {
    let old = Server::start(&[]);
    let new = Server::start(&[]);
    new.replicate(&old);
    let mut session_con = old.client();
    let id = open(&mut session_con, GRACE_MS);
    let mut o = old.client();
    acquire(&mut o, "order", "alice", 30_000, &["SESSION", &id]).expect("granted");
    common::sync_replicas(&mut o);

    let mut n = new.client();
    promote(&mut n);
    let port = new.port.to_string();
    call(&mut o, &["REPLICAOF", "127.0.0.1", &port]);
    wait_until("the old master forgot its sessions", || {
        info_field(&mut o, "lock", "lock_sessions").as_deref() == Some("0")
    });
    drop(session_con);
    thread::sleep(Duration::from_millis(GRACE_MS + 300));
    assert_eq!(
        holder(&mut n, "order").as_deref(),
        Some("alice"),
        "the lease holds it"
    );
    assert_eq!(session_of(&mut n, "order"), None);
    assert!(error(&mut n, &["LOCK.SESSION", "ATTACH", &id]).contains("no such session"));
    // A client ties it to a session on the new master by renewing.
    let mut fresh = new.client();
    let id = open(&mut fresh, GRACE_MS);
    assert_eq!(
        call(
            &mut n,
            &[
                "LOCK.RENEW",
                "order",
                "alice",
                "30000",
                "SESSION",
                &id,
                "NOSYNC"
            ]
        ),
        Value::Int(1)
    );
    assert_eq!(session_of(&mut n, "order"), Some(id));
}
