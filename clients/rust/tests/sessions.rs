//! Sessions against real servers: a holder process killed with `kill -9` hands its lock to the
//! waiter a grace later, not after its lease; a killed session connection is replaced within
//! the grace and nothing is handed over; a holder cut off for longer than the grace learns it
//! lost the lock before the waiter is granted it; one session serves every clone and task of a
//! client and `close` frees its holdings; after a restart (a new master has no sessions) the
//! holdings are tied to a new session; and with sessions off, holdings rest on their leases.
//! Each pooled connection is bound to the session once (`LOCK.SESSION USE`), so grants and
//! renewals carry no session; after the session was ended — by `CLOSE` from outside, or by its
//! grace — the connections are bound to the next one, a connection still bound to the ended one
//! is refused, and nothing is ever granted untied.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::Write;
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

/// `key`, taken by `client` waiting in the server up to 2 s.
async fn waited(client: &Client, key: &str) -> leasehold_client::Guard {
    let lock = Lock::new(client, key);
    let guard = lock.acquire_timeout(TTL, Duration::from_secs(2)).await;
    guard.expect("acquire").expect("free")
}

/// Sessions of `grace`, and one connection in each pool: which connection carries what is known.
fn one_of_each(grace: Duration) -> ClientOptions {
    ClientOptions::new()
        .session_grace(grace)
        .sync_connections(1)
        .wait_connections(1)
}

/// What [`Monitor::stop`] sends to end the monitoring.
const MONITOR_STOP: &str = "leasehold-monitor-stop";

/// The commands a server runs (`MONITOR`: `<time> [<db> <address>] "COMMAND" "arg" ...`), from
/// [`Monitor::start`] until [`Monitor::stop`], read on a thread.
struct Monitor(std::thread::JoinHandle<Vec<String>>);

impl Monitor {
    fn start(server: &Server) -> Self {
        let mut con = server.client();
        let monitor = redis::cmd("MONITOR").get_packed_command();
        con.send_packed_command(&monitor).expect("MONITOR");
        con.recv_response().expect("MONITOR's OK");
        Self(std::thread::spawn(move || {
            let mut lines = Vec::new();
            while let Ok(Value::SimpleString(line)) = con.recv_response() {
                if line.contains(MONITOR_STOP) {
                    break;
                }
                lines.push(line);
            }
            lines
        }))
    }

    /// Every command run since the start, in order.
    fn stop(self, con: &mut redis::Connection) -> Vec<String> {
        call(con, &["ECHO", MONITOR_STOP]);
        self.0.join().expect("the monitor")
    }
}

/// The lines of `lines` that run `words` (`["LOCK.ACQUIRE", "k"]`: `LOCK.ACQUIRE` on `k`).
fn ran<'a>(lines: &'a [String], words: &[&str]) -> Vec<&'a str> {
    let quoted: Vec<String> = words.iter().map(|word| format!("\"{word}\"")).collect();
    let pattern = format!("] {}", quoted.join(" "));
    let runs = |line: &&String| line.contains(&pattern);
    lines.iter().filter(runs).map(String::as_str).collect()
}

/// The client address of a `MONITOR` line: which connection sent it.
fn sender(line: &str) -> &str {
    let (_, rest) = line.split_once('[').expect("[db address]");
    let (inside, _) = rest.split_once(']').expect("]");
    inside.split(' ').nth(1).expect("address")
}

/// The `LOCK.SESSION USE` and `LOCK.ACQUIRE` lines of `lines` that `connection` sent, in order.
fn uses_and_acquires<'a>(lines: &'a [String], connection: &str) -> Vec<&'a str> {
    let picked = |line: &&String| {
        sender(line) == connection
            && (line.contains("\"LOCK.SESSION\" \"USE\"") || line.contains("\"LOCK.ACQUIRE\""))
    };
    lines.iter().filter(picked).map(String::as_str).collect()
}

/// Whether a `MONITOR` line's command names session `id`.
fn names(line: &str, id: &str) -> bool {
    line.contains(&format!("\"SESSION\" \"{id}\""))
}

/// The link `proxy` cut, back on the same port.
fn relink(proxy: LinkProxy, target: u16) -> LinkProxy {
    let port = proxy.port;
    drop(proxy);
    for _ in 0..100 {
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return LinkProxy::on(listener, target);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("port {port} stays taken");
}

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

/// The session `key`'s holder is tied to (`LOCK.INFO`'s `session`), `None` when it is tied to
/// none or the lock is free.
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
    let url = server.url();
    let (child, token) = tokio::task::spawn_blocking(move || {
        common::test_process("holder_process", (HOLDER_URL, &url), "HOLDING ")
    })
    .await
    .expect("the holder process");
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

#[tokio::test(flavor = "multi_thread")]
async fn each_pooled_connection_is_bound_once_and_grants_and_renewals_then_carry_no_session() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let monitor = Monitor::start(&server);
    let client = client(&server.url(), one_of_each(GRACE)).await;
    let mut guards = Vec::new();
    for key in ["a", "b", "c"] {
        let guard = Lock::new(&client, key).try_acquire(TTL).await;
        guards.push(guard.expect("acquire").expect("free"));
    }
    guards.push(waited(&client, "d").await);
    for guard in &guards {
        assert!(guard.renew(TTL).await.expect("renew"));
    }
    let session = client.session_id().expect("opened");
    for key in ["a", "b", "c", "d"] {
        assert_eq!(tied_to(&mut con, key).as_ref(), Some(&session), "{key}");
    }
    assert_eq!(
        sessions_field(&mut con, "lock_session_connections"),
        2,
        "the sync and the wait connection use the session"
    );

    let lines = monitor.stop(&mut con);
    let uses = ran(&lines, &["LOCK.SESSION", "USE", &session]);
    assert_eq!(uses.len(), 2, "once per connection: {uses:#?}");
    let mut writes = ran(&lines, &["LOCK.ACQUIRE"]);
    writes.extend(ran(&lines, &["LOCK.RENEW"]));
    assert_eq!(writes.len(), 8, "4 grants and 4 renewals: {writes:#?}");
    let naming: Vec<_> = writes.iter().filter(|line| names(line, &session)).collect();
    assert_eq!(
        naming.len(),
        2,
        "only each connection's first write, behind its USE: {writes:#?}"
    );
    for line in &naming {
        let behind_use = uses.iter().any(|used| sender(used) == sender(line));
        assert!(behind_use, "{line}: its connection's USE came first");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_bound_to_a_closed_session_is_bound_again_and_nothing_is_granted_untied() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let monitor = Monitor::start(&server);
    // A long grace: the heartbeat (every 10 s) does not find the sessions closed first.
    let client = client(&server.url(), one_of_each(Duration::from_secs(30))).await;
    let a = Lock::new(&client, "a").try_acquire(TTL).await;
    let a = a.expect("acquire").expect("free");
    let first = client.session_id().expect("opened");
    assert_eq!(tied_to(&mut con, "a"), Some(first.clone()));

    // Someone closes it (releasing a): the sync connection, bound to it, is refused; the client
    // opens another session, binds the connection to it, and the acquire goes on.
    let closed = call(&mut con, &["LOCK.SESSION", "CLOSE", &first]);
    assert_eq!(closed, Value::Int(1));
    let c = Lock::new(&client, "c").try_acquire(TTL).await;
    let c = c.expect("acquire").expect("free");
    let second = client.session_id().expect("opened again");
    assert_ne!(second, first);
    assert_eq!(tied_to(&mut con, "c"), Some(second.clone()));
    tokio::time::timeout(Duration::from_secs(2), a.lost())
        .await
        .expect("a is lost");

    // And that one too (releasing c): the wait connection, new, is bound in the wait's round
    // trip; its USE fails, and the acquire behind it, naming the session, is refused too — it
    // does not wait or take the lock untied. The next attempt binds it to a third session.
    let closed = call(&mut con, &["LOCK.SESSION", "CLOSE", &second]);
    assert_eq!(closed, Value::Int(1));
    let d = waited(&client, "d").await;
    let third = client.session_id().expect("opened a third time");
    assert_ne!(third, second);
    assert_eq!(tied_to(&mut con, "d"), Some(third.clone()));
    assert_eq!(sessions_field(&mut con, "lock_session_connections"), 2);

    let lines = monitor.stop(&mut con);
    assert!(
        ran(&lines, &["LOCK.RELEASE"]).is_empty(),
        "nothing was granted untied (and released)"
    );
    let d_first = ran(&lines, &["LOCK.ACQUIRE", "d"])[0];
    let before_d = lines.iter().position(|line| line == d_first).expect("d");
    let sync = sender(ran(&lines, &["LOCK.ACQUIRE", "a"])[0]);
    let on_sync = uses_and_acquires(&lines[..before_d], sync);
    assert_eq!(on_sync.len(), 5, "{on_sync:#?}");
    assert!(on_sync[0].ends_with(&format!("\"USE\" \"{first}\"")));
    assert!(names(on_sync[1], &first) && on_sync[1].contains("\"a\""));
    assert!(
        on_sync[2].contains("\"c\"") && !on_sync[2].contains("SESSION"),
        "bound: no session, refused: {on_sync:#?}"
    );
    assert!(on_sync[3].ends_with(&format!("\"USE\" \"{second}\"")));
    assert!(on_sync[4].contains("\"c\""));

    let on_wait = uses_and_acquires(&lines, sender(d_first));
    assert_eq!(on_wait.len(), 4, "{on_wait:#?}");
    assert!(on_wait[0].ends_with(&format!("\"USE\" \"{second}\"")));
    assert!(names(on_wait[1], &second), "{on_wait:#?}");
    assert!(on_wait[2].ends_with(&format!("\"USE\" \"{third}\"")));
    assert!(names(on_wait[3], &third), "{on_wait:#?}");
    drop((c, d));
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_session_ended_by_its_grace_new_holdings_are_tied_to_the_next_one() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let proxy = LinkProxy::to(server.port);
    let client = client(
        &format!("redis://127.0.0.1:{}", proxy.port),
        one_of_each(GRACE),
    )
    .await;
    let guard = waited(&client, "k").await;
    let first = client.session_id().expect("opened");
    assert_eq!(tied_to(&mut con, "k"), Some(first.clone()));
    assert_eq!(sessions_field(&mut con, "lock_session_connections"), 1);

    proxy.cut();
    tokio::time::timeout(GRACE * 2, guard.lost())
        .await
        .expect("told within the grace");
    common::wait_until("the session ends by its grace", || {
        sessions_field(&mut con, "lock_sessions_expired") == 1
    });
    assert_eq!(holder(&mut con, "k"), None, "released by the session's end");
    assert_eq!(sessions_field(&mut con, "lock_session_connections"), 0);

    let _proxy = relink(proxy, server.port);
    common::wait_until("a new session", || {
        client.session_id().is_some_and(|id| id != first)
    });
    let second = client.session_id().expect("opened again");
    // The wait connection died with the link: the acquire finds out for itself (on a sync
    // connection) and is granted; then a new wait connection takes another lock. Both are
    // bound to the new session.
    let again = waited(&client, "k").await;
    let other = waited(&client, "j").await;
    assert_eq!(client.session_id().as_ref(), Some(&second));
    for key in ["k", "j"] {
        assert_eq!(tied_to(&mut con, key).as_ref(), Some(&second), "{key}");
    }
    assert_eq!(sessions_field(&mut con, "lock_session_connections"), 2);
    assert!(again.renew(TTL).await.expect("renew"));
    assert_eq!(tied_to(&mut con, "k").as_ref(), Some(&second));
    assert!(
        !guard.renew(TTL).await.expect("no renewal"),
        "never taken back"
    );
    drop(other);
}
