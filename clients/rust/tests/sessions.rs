//! Sessions against real servers: a holder process killed with `kill -9` hands its lock to the
//! waiter a grace later, not after its lease; a killed session connection is replaced within
//! the grace and nothing is handed over; a holder cut off for longer than the grace learns it
//! lost the lock before the waiter is granted it; one session serves every clone and task of a
//! client and `close` frees its holdings; after a restart (a new master has no sessions) the
//! holdings are tied to a new session; and with sessions off, holdings rest on their leases.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::proxy::LinkProxy;
use common::{Server, call, holder, info_field, info_fields, queued, waiters};
use leasehold_client::{Client, ClientOptions, Lock};
use redis::Value;
use tokio::time::Instant;

/// The holders' session grace: short, so that each test takes a few seconds.
const GRACE: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(30);
/// Set for the child process that [`holder_process`] runs as: the server's URL.
const HOLDER_URL: &str = "LEASEHOLD_SESSION_HOLDER_URL";

async fn client(url: &str, options: ClientOptions) -> Client {
    Client::open_with(url, options).await.expect("connect")
}

/// A client with sessions of [`GRACE`].
async fn session_client(url: &str) -> Client {
    client(url, ClientOptions::new().session_grace(GRACE)).await
}

/// The session `key`'s holder is tied to (`LOCK.INFO`'s `session`), `None` when it is tied to
/// none or the lock is free.
/// A client of its own waiting up to 10 s for the lock `k`: its guard, and when it got it.
async fn waiter_for_k(
    url: &str,
) -> tokio::task::JoinHandle<(
    leasehold_client::Result<Option<leasehold_client::Guard>>,
    Instant,
)> {
    let waiter = client(url, ClientOptions::new()).await;
    tokio::spawn(async move {
        let lock = Lock::new(&waiter, "k");
        let guard = lock.acquire_timeout(TTL, Duration::from_secs(10)).await;
        (guard, Instant::now())
    })
}

fn tied_to(con: &mut redis::Connection, key: &str) -> Option<String> {
    match info_fields(con, key)?.get("session") {
        Some(Value::BulkString(id)) => Some(String::from_utf8_lossy(id).into_owned()),
        _ => None,
    }
}

/// A field of `INFO lock`'s `lock_sessions` section.
fn sessions_field(con: &mut redis::Connection, field: &str) -> u64 {
    let value = info_field(con, "lock", field);
    value
        .and_then(|value| value.trim().parse().ok())
        .expect(field)
}

/// The client ids of the connections named `leasehold-session` (`CLIENT LIST`).
fn session_connections(con: &mut redis::Connection) -> Vec<i64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(con)
        .expect("CLIENT LIST");
    list.lines()
        .filter(|line| {
            line.split(' ')
                .any(|field| field == "name=leasehold-session")
        })
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect()
}

/// A child process, killed (`SIGKILL`) and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Not a test of its own: the holder process of
/// [`a_holder_killed_with_kill_9_is_handed_over_a_grace_later_not_after_its_lease`], which runs
/// this test binary again with only this test and [`HOLDER_URL`] set. It takes `k` with a 30 s
/// lease, sessions of [`GRACE`], prints `HOLDING <token>` and sleeps until it is killed. Without
/// the variable it does nothing.
#[test]
fn holder_process() {
    let Ok(url) = std::env::var(HOLDER_URL) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = session_client(&url).await;
        let guard = Lock::new(&client, "k").try_acquire(TTL).await;
        let guard = guard.expect("acquire").expect("free");
        let mut out = std::io::stdout();
        writeln!(out, "HOLDING {}", guard.token()).expect("stdout");
        out.flush().expect("stdout");
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(guard);
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_killed_with_kill_9_is_handed_over_a_grace_later_not_after_its_lease() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let exe = std::env::current_exe().expect("this test binary");
    let child = Command::new(exe)
        .args([
            "holder_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_URL, server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the holder process");
    let mut child = Killed(child);
    let stdout = child.0.stdout.take().expect("its stdout");
    let token = tokio::task::spawn_blocking(move || {
        let lines = BufReader::new(stdout).lines();
        let line = lines
            .map_while(Result::ok)
            .find(|line| line.contains("HOLDING "));
        let line = line.expect("the holder says it holds the lock");
        let (_, token) = line.split_once("HOLDING ").expect("HOLDING");
        token.trim().parse::<u64>().expect("its token")
    })
    .await
    .expect("reading the holder");
    assert!(tied_to(&mut con, "k").is_some(), "tied to its session");

    let waiting = waiter_for_k(&server.url()).await;
    queued(&mut con, "k", 1);
    let killed = Instant::now();
    drop(child); // kill -9
    let (guard, granted_at) = waiting.await.expect("the waiter");
    let guard = guard.expect("wait").expect("granted");
    let took = granted_at - killed;
    assert!(
        took >= GRACE - Duration::from_millis(50) && took <= GRACE + Duration::from_millis(100),
        "granted {took:?} after the kill, with a grace of {GRACE:?}"
    );
    assert!(guard.token() > token, "a larger fencing token");
    assert_eq!(sessions_field(&mut con, "lock_sessions_expired"), 1);
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_session_connection_is_replaced_within_the_grace_and_nothing_is_handed_over() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = session_client(&server.url()).await;
    let guard = Lock::new(&client, "k").try_acquire(TTL).await;
    let guard = guard.expect("acquire").expect("free");
    let session = client.session_id().expect("opened by the acquire");
    assert_eq!(tied_to(&mut con, "k").as_ref(), Some(&session));
    let waiter = common::wait_for(&server, "k", "waiter", 10_000);
    queued(&mut con, "k", 1);

    let [killed] = session_connections(&mut con)[..] else {
        panic!("one session connection");
    };
    let count: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(killed)
        .query(&mut con)
        .expect("CLIENT KILL");
    assert_eq!(count, 1);
    tokio::time::sleep(GRACE + Duration::from_millis(300)).await;
    assert_eq!(waiters(&mut con, "k"), 1, "the waiter still waits");
    assert_eq!(holder(&mut con, "k").as_deref(), Some(guard.owner()));
    assert_eq!(
        tied_to(&mut con, "k"),
        Some(session.clone()),
        "same session"
    );
    assert!(guard.is_held(), "the holder was not told it lost the lock");
    assert!(guard.lease_end() > Instant::now());
    let replaced = session_connections(&mut con);
    assert!(
        replaced.len() == 1 && replaced[0] != killed,
        "a new connection: {replaced:?}"
    );
    assert_eq!(sessions_field(&mut con, "lock_sessions_expired"), 0);
    assert_eq!(sessions_field(&mut con, "lock_sessions_detached"), 0);

    let first = guard.token();
    assert!(guard.release().await.expect("release"));
    let granted = common::granted(waiter);
    assert!(u64::try_from(granted).expect("token") > first);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_cut_off_longer_than_the_grace_learns_it_lost_the_lock_before_the_waiter_gets_it()
{
    let server = Server::start(&[]);
    let mut con = server.client();
    let proxy = LinkProxy::to(server.port);
    let holder_client = session_client(&format!("redis://127.0.0.1:{}", proxy.port)).await;
    let guard = Lock::new(&holder_client, "k").try_acquire(TTL).await;
    let guard = guard.expect("acquire").expect("free");
    let lost = guard.lost_signal();
    let lost_at = tokio::spawn(async move {
        lost.wait().await;
        Instant::now()
    });
    let waiting = waiter_for_k(&server.url()).await;
    queued(&mut con, "k", 1);
    // Heartbeats go on through the proxy: still held after several of them.
    tokio::time::sleep(GRACE * 2).await;
    assert!(guard.is_held());

    let cut = Instant::now();
    proxy.cut();
    let lost_at = lost_at.await.expect("the holder is told");
    let (granted, granted_at) = waiting.await.expect("the waiter");
    let granted = granted.expect("wait").expect("granted");
    assert!(
        lost_at < granted_at,
        "lost {:?} after the cut, granted {:?} after it",
        lost_at - cut,
        granted_at - cut
    );
    assert!(
        lost_at - cut <= GRACE,
        "lost {:?} after the cut",
        lost_at - cut
    );
    assert!(
        granted_at - cut >= GRACE,
        "granted {:?} after the cut",
        granted_at - cut
    );
    assert!(!guard.is_held());
    assert!(guard.lease_end() <= lost_at, "it counted on no more");
    assert!(granted.token() > guard.token());
    assert!(
        !guard.renew(TTL).await.expect("no renewal"),
        "never taken back"
    );
    assert_eq!(holder(&mut con, "k").as_deref(), Some(granted.owner()));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_session_serves_every_clone_and_task_and_close_frees_its_holdings() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = session_client(&server.url()).await;
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move {
                let lock = Lock::new(&client, &format!("k{n}"));
                lock.try_acquire(TTL).await.expect("acquire").expect("free")
            })
        })
        .collect();
    let mut guards = Vec::new();
    for task in tasks {
        guards.push(task.await.expect("a task"));
    }
    let session = client.session_id().expect("opened");
    assert_eq!(sessions_field(&mut con, "lock_sessions"), 1, "one session");
    assert_eq!(session_connections(&mut con).len(), 1);
    for n in 0..8 {
        assert_eq!(tied_to(&mut con, &format!("k{n}")).as_ref(), Some(&session));
    }
    // A set, a re-entry and a watched lock's renewals stay tied to it.
    let set = Lock::multi(&client, &["{s}a", "{s}b"])
        .try_acquire(TTL)
        .await;
    let set = set.expect("acquire").expect("free");
    let watched = Lock::new(&client, "w").with_watchdog(true);
    let watched = watched.try_acquire(Duration::from_millis(300)).await;
    let watched = watched.expect("acquire").expect("free");
    let inner = guards[0]
        .reenter(TTL)
        .await
        .expect("reenter")
        .expect("held");
    tokio::time::sleep(Duration::from_millis(400)).await;
    for key in ["{s}a", "{s}b", "w", "k0"] {
        assert_eq!(tied_to(&mut con, key).as_ref(), Some(&session), "{key}");
    }
    drop(inner);

    let lost = guards[3].lost_signal();
    let released = client.close().await.expect("close");
    assert_eq!(released, 11, "8 locks, a set of 2 and the watched one");
    tokio::time::timeout(Duration::from_secs(1), lost.wait())
        .await
        .expect("told at once");
    assert!(guards.iter().chain([&set, &watched]).all(|g| !g.is_held()));
    for key in ["k0", "k7", "{s}a", "w"] {
        assert_eq!(holder(&mut con, key), None, "{key} released");
    }
    assert_eq!(client.session_id(), None);
    assert_eq!(sessions_field(&mut con, "lock_sessions"), 0);
    // The client goes on with a new session.
    let again = Lock::new(&client, "k0").try_acquire(TTL).await;
    let again = again.expect("acquire").expect("free");
    let reopened = client.session_id().expect("a new session");
    assert_ne!(reopened, session);
    assert_eq!(tied_to(&mut con, "k0"), Some(reopened.clone()));

    // Someone else ends that session (releasing k0): the next acquire is told the server has
    // no such session, opens another and goes on; the released holding is reported lost.
    let closed = call(&mut con, &["LOCK.SESSION", "CLOSE", &reopened]);
    assert_eq!(closed, Value::Int(1));
    let next = Lock::new(&client, "x").try_acquire(TTL).await;
    let next = next.expect("acquire").expect("free");
    let third = client.session_id().expect("opened again");
    assert_ne!(third, reopened);
    assert_eq!(tied_to(&mut con, "x"), Some(third));
    tokio::time::timeout(Duration::from_secs(2), again.lost())
        .await
        .expect("lost");
    assert!(next.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_restart_the_holdings_are_tied_to_a_new_session_and_a_closed_one_is_lost() {
    // The restarted server has the lock from its AOF but no sessions, as a promoted replica.
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = client(&server.url(), ClientOptions::new()).await; // the server's grace, 3 s
    let guard = Lock::new(&client, "k").try_acquire(TTL).await;
    let guard = guard.expect("acquire").expect("free");
    let first = client.session_id().expect("opened");
    server.kill();
    server.restart();
    let mut con = server.client();
    common::wait_until("tied to a new session", || {
        tied_to(&mut con, "k").is_some_and(|id| id != first)
    });
    let second = client.session_id().expect("reopened");
    assert_eq!(tied_to(&mut con, "k"), Some(second.clone()));
    assert!(guard.is_held(), "renewed with the new session: still held");
    assert!(guard.lease_end() > Instant::now() + Duration::from_secs(2));
    assert_eq!(holder(&mut con, "k").as_deref(), Some(guard.owner()));

    // Someone ends the session: the server releases the lock, the holder finds out at its
    // next heartbeat, and a new session cannot take the lock back.
    let closed = call(&mut con, &["LOCK.SESSION", "CLOSE", &second]);
    assert_eq!(closed, Value::Int(1));
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost");
    assert_eq!(holder(&mut con, "k"), None, "not taken back");
    assert!(!guard.is_held());
    assert!(
        !guard.renew(TTL).await.expect("no renewal"),
        "never taken back"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_sessions_off_holdings_rest_on_their_leases() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = client(&server.url(), ClientOptions::new().sessions(false)).await;
    let guard = Lock::new(&client, "k")
        .try_acquire(Duration::from_millis(300))
        .await;
    let guard = guard.expect("acquire").expect("free");
    assert_eq!(client.session_id(), None);
    assert_eq!(tied_to(&mut con, "k"), None);
    assert!(session_connections(&mut con).is_empty());
    assert_eq!(sessions_field(&mut con, "lock_sessions"), 0);
    assert_eq!(client.close().await.expect("nothing to close"), 0);
    assert!(guard.is_held());
    assert!(guard.renew(Duration::from_secs(1)).await.expect("renew"));
    assert!(guard.release().await.expect("release"));
}
