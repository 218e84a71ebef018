//! What a client that may not administer the server can make the module do through input
//! anyone can send (issue 51): nothing.
//!
//! - A Sentinel's hello (`PUBLISH __sentinel__:hello ...`) is believed only from a Sentinel
//!   whose command link's user may run `SLAVEOF`; a forged one never makes the server
//!   replicate, and the module connects to no address it names — so it never sends the
//!   server's `masterauth` there.
//! - A connection named like a Sentinel's (`CLIENT SETNAME sentinel-<8 hex>-cmd`) marks the
//!   server as part of a replication group only when its user may run `SLAVEOF`: an
//!   application user's stops no synced grant, now or after a restart.
//! - A replica asks its master `ROLE` with `masteruser` and `masterauth`; a user without
//!   `+role` is logged once and shown by `INFO lock` (`lock_insync_role_check`).
//!
//! The attacker is a least-privilege application user: it may publish on any channel and name
//! its connection, but not run `SLAVEOF`, `CONFIG` or `INFO` (`-@admin -@dangerous`).

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use common::{Server, call, info_field, try_acquire, wait_within};
use redis::{Connection, Value};

/// The server's `masterauth`: what a forged hello would have it send to an address it names.
const MASTERAUTH: &str = "s3cret-master-password";

/// The default user's password once [`secure`] set it.
const REQUIREPASS: &str = "admin-password";

/// A Sentinel's run id, as a forged hello gives it (40 hex digits).
const RUN_ID: &str = "abcdef0123456789abcdef0123456789abcdef01";

/// Gives `server` an application user `app` (`apppass`) that may publish on any channel and
/// name its connection but not administer the server, sets `masterauth` and, last,
/// `requirepass`. Returns a connection of the default user, authenticated.
fn secure(server: &Server) -> Connection {
    let mut admin = server.client();
    call(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">apppass",
            "~*",
            "&*",
            "+@all",
            "-@admin",
            "-@dangerous",
        ],
    );
    call(&mut admin, &["CONFIG", "SET", "masterauth", MASTERAUTH]);
    call(&mut admin, &["CONFIG", "SET", "requirepass", REQUIREPASS]);
    // The connection stays authenticated; a new one must say the password.
    let refused = redis::cmd("PING").query::<String>(&mut server.client());
    assert!(refused.is_err(), "PING without the password: {refused:?}");
    admin
}

/// A connection of the application user.
fn app(server: &Server) -> Connection {
    redis::Client::open(format!("redis://app:apppass@127.0.0.1:{}/", server.port))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("connect as app")
}

/// How many times `text` says `line`.
fn count(text: &str, line: &str) -> usize {
    text.matches(line).count()
}

/// A plain TCP listener that records every connection it is offered and every byte sent on
/// it: where a forged hello points the module.
struct Listener {
    port: u16,
    connections: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (connections, received, stop) =
                (connections.clone(), received.clone(), stop.clone());
            thread::spawn(move || {
                let mut open = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((stream, _)) = listener.accept() {
                        connections.fetch_add(1, Ordering::Relaxed);
                        stream.set_nonblocking(true).expect("nonblocking");
                        open.push(stream);
                    }
                    let mut buffer = [0u8; 4096];
                    for stream in &mut open {
                        while let Ok(n @ 1..) = stream.read(&mut buffer) {
                            received.lock().expect("bytes").extend(&buffer[..n]);
                        }
                    }
                    thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Self {
            port,
            connections,
            received,
            stop,
            thread: Some(thread),
        }
    }

    /// The connections offered so far, and the bytes received on them.
    fn seen(&self) -> (usize, Vec<u8>) {
        (
            self.connections.load(Ordering::Relaxed),
            self.received.lock().expect("bytes").clone(),
        )
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A hello from the Sentinel at 127.0.0.1:`sentinel_port` naming 127.0.0.1:`master_port` the
/// master of `mymaster` at configuration epoch 1000.
fn hello(sentinel_port: u16, master_port: u16) -> String {
    format!("127.0.0.1,{sentinel_port},{RUN_ID},1000,mymaster,127.0.0.1,{master_port},1000")
}

/// An application user names its connection like the Sentinel whose run id it forges, and
/// publishes hellos naming another server, then its own listener, as the master, with that
/// listener as the Sentinel: the master stays a master with its own data, the other server
/// and the listener get no connection from it (so never its `masterauth`), and it counts no
/// Sentinel.
#[test]
fn a_forged_hello_never_makes_the_server_replicate_or_send_its_password() {
    let master = Server::start(&[]);
    let mut admin = secure(&master);
    call(&mut admin, &["SET", "important", "ours"]);
    let other = Server::without_module(&[]);
    let mut theirs = other.client();
    call(&mut theirs, &["SET", "theirs", "not ours"]);
    let connections_before = info_field(&mut theirs, "stats", "total_connections_received");
    let listener = Listener::start();

    let mut attacker = app(&master);
    let link_name = format!("sentinel-{}-cmd", &RUN_ID[..8]);
    call(&mut attacker, &["CLIENT", "SETNAME", &link_name]);
    for payload in [
        hello(listener.port, other.port),
        hello(listener.port, listener.port),
        hello(listener.port, other.port),
    ] {
        let receivers: i64 = redis::cmd("PUBLISH")
            .arg("__sentinel__:hello")
            .arg(&payload)
            .query(&mut attacker)
            .expect("the application user may publish");
        assert_eq!(receivers, 0);
        thread::sleep(Duration::from_secs(1));
    }
    thread::sleep(Duration::from_secs(4));

    assert_eq!(
        info_field(&mut admin, "replication", "role").as_deref(),
        Some("master")
    );
    assert_eq!(
        call(&mut admin, &["GET", "important"]),
        Value::BulkString(b"ours".to_vec())
    );
    assert_eq!(call(&mut admin, &["EXISTS", "theirs"]), Value::Int(0));
    assert_eq!(
        info_field(&mut theirs, "replication", "connected_slaves").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&mut theirs, "stats", "total_connections_received"),
        connections_before,
        "the server the hellos name as master was never contacted"
    );
    let (offered, received) = listener.seen();
    let password_sent = received
        .windows(MASTERAUTH.len())
        .any(|window| window == MASTERAUTH.as_bytes());
    assert!(!password_sent, "the listener received masterauth");
    assert_eq!(
        (offered, received.as_slice()),
        (0, &b""[..]),
        "the listener the hellos name as Sentinel and master was never contacted"
    );
    assert_eq!(
        info_field(&mut admin, "lock", "lock_insync_sentinels").as_deref(),
        Some("0")
    );
    assert!(
        master.log().contains("is not taken for one"),
        "the log says the forged link is not a Sentinel's"
    );
}

/// An application user names its connection like a Sentinel's command link and keeps it
/// open: the lone master still grants synced locks at once, writes no state file that says it
/// belongs to a replication group, and after a restart still grants at once.
#[test]
fn a_client_naming_its_connection_like_a_sentinel_stops_no_grant() {
    let mut server = Server::start(&[]);
    let mut admin = secure(&server);
    let mut attacker = app(&server);
    call(
        &mut attacker,
        &["CLIENT", "SETNAME", "sentinel-abcdef01-cmd"],
    );
    wait_within(
        Duration::from_secs(5),
        "the module looked at the connection and did not take it for a Sentinel's",
        || server.log().contains("is not taken for one"),
    );
    assert!(server.log().contains("its user app may not run SLAVEOF"));
    // A look of the in-sync set after the scan.
    thread::sleep(Duration::from_millis(500));

    let token = try_acquire(&mut admin, "k", "a", 30_000)
        .unwrap_or_else(|error| panic!("a synced grant on a lone master: {error}"));
    assert_eq!(
        info_field(&mut admin, "lock", "lock_insync_sentinels").as_deref(),
        Some("0")
    );
    assert!(
        !server.dir().join("dump.leasehold").exists(),
        "the server keeps no state: it belongs to no group"
    );

    // SHUTDOWN through the harness, which connects without a password.
    call(&mut admin, &["CONFIG", "SET", "requirepass", ""]);
    drop(attacker);
    server.shutdown("SAVE");
    server.restart();
    let mut con = server.client();
    let after = try_acquire(&mut con, "after-restart", "a", 30_000)
        .unwrap_or_else(|error| panic!("a synced grant after the restart: {error}"));
    assert!(after > token, "{after} after {token}");
    assert_eq!(common::holder(&mut con, "k").as_deref(), Some("a"));
}

/// The same connection name from a user who may run `SLAVEOF` (the default user, with every
/// right) is believed, by design: such a user could make the server replicate anyway. The
/// lone master then belongs to a replication group and refuses synced grants it cannot count.
#[test]
fn a_user_who_may_run_slaveof_is_believed() {
    let server = Server::start(&[]);
    let mut con = server.client();
    assert!(try_acquire(&mut con, "before", "a", 30_000).is_ok());
    let mut link = server.client();
    call(&mut link, &["CLIENT", "SETNAME", "sentinel-abcdef01-cmd"]);
    let mut refusal = String::new();
    let mut attempt = 0;
    wait_within(
        Duration::from_secs(5),
        "synced grants refused once the link is believed",
        || {
            attempt += 1;
            match try_acquire(&mut con, &format!("key-{attempt}"), "a", 30_000) {
                Ok(_) => false,
                Err(error) => {
                    refusal = error;
                    true
                }
            }
        },
    );
    assert!(
        refusal.starts_with("NOREPLICAS") && refusal.contains("0 in-sync replicas"),
        "{refusal}"
    );
    assert!(!server.log().contains("is not taken for one"));
}

/// A replica asks its master `ROLE` as `masteruser` when the master goes quiet (the master's
/// default user needs a password); a replication user with only `+psync +replconf +ping` is refused, which the replica logs once and shows in
/// `INFO lock` (`lock_insync_role_check:refused: NOPERM ...`) until an answer comes: once the
/// user may run `ROLE`, it reads `ok`. The master goes quiet under `CLIENT PAUSE WRITE`,
/// which stops its in-sync lists but not its answers to `ROLE`.
#[test]
fn a_replication_user_without_role_is_told_in_info() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    let mut on_master = master.client();
    call(
        &mut on_master,
        &[
            "ACL",
            "SETUSER",
            "repl",
            "on",
            ">replpass",
            "+psync",
            "+replconf",
            "+ping",
        ],
    );
    let mut on_replica = replica.client();
    call(&mut on_replica, &["CONFIG", "SET", "masteruser", "repl"]);
    call(
        &mut on_replica,
        &["CONFIG", "SET", "masterauth", "replpass"],
    );
    replica.replicate(&master);
    // Only `repl` may be used now: the replica asks `ROLE` without credentials first, and
    // with them once the master says NOAUTH.
    call(
        &mut on_master,
        &["CONFIG", "SET", "requirepass", REQUIREPASS],
    );
    let role_check = |con: &mut Connection| info_field(con, "lock", "lock_insync_role_check");

    call(&mut on_master, &["CLIENT", "PAUSE", "8000", "WRITE"]);
    wait_within(
        Duration::from_secs(10),
        "the replica shows its question refused",
        || role_check(&mut on_replica).is_some_and(|check| check.starts_with("refused: NOPERM")),
    );
    // It asks again every second while the master is quiet, and logs only the first refusal.
    thread::sleep(Duration::from_secs(2));
    call(&mut on_master, &["CLIENT", "UNPAUSE"]);
    let log = replica.log();
    assert_eq!(count(&log, "cannot ask the master"), 1, "{log}");
    assert!(log.contains("needs +role"), "the log says what to grant");
    // The master heard again, no question in flight: the refusal stays until the next answer.
    thread::sleep(Duration::from_secs(2));
    assert!(
        role_check(&mut on_replica).is_some_and(|check| check.starts_with("refused: NOPERM")),
        "{:?}",
        role_check(&mut on_replica)
    );

    call(&mut on_master, &["ACL", "SETUSER", "repl", "+role"]);
    call(&mut on_master, &["CLIENT", "PAUSE", "8000", "WRITE"]);
    wait_within(
        Duration::from_secs(10),
        "the replica's question answered",
        || role_check(&mut on_replica).as_deref() == Some("ok"),
    );
    call(&mut on_master, &["CLIENT", "UNPAUSE"]);
    assert_eq!(count(&replica.log(), "cannot ask the master"), 1);
}
