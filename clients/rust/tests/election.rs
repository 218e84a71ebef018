//! Elections against real servers: a candidate campaigns, leads with an epoch, proclaims and
//! resigns; a waiting candidate leads at once after a resignation, with a larger epoch; a stale
//! epoch's proclaim and resignation are refused and change nothing; an observer is told every
//! state in order, vacancies included; a leader cut off for longer than the session's grace is
//! told it lost its term before the next candidate leads, a grace after the cut, and observers
//! see the vacancy first; and a connection blip within the grace keeps the term.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::thread::JoinHandle;
use std::time::Duration;

use common::proxy::LinkProxy;
use common::{Server, call, info_field, queued, waiters};
use futures_util::StreamExt;
use leasehold_client::{Client, ClientOptions, Election, LeaderState, Leadership, Sync};
use redis::Value;
use tokio::time::{Instant, timeout};

/// The session grace of the leaders' clients: short, so that each test takes a few seconds.
const GRACE: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(30);
/// How long a test waits for something that should come at once.
const SOON: Duration = Duration::from_secs(2);
/// Set for the child process that [`leader_process`] runs as: the server's URL.
const LEADER_URL: &str = "LEASEHOLD_ELECTION_LEADER_URL";

async fn connect(url: &str) -> Client {
    let options = ClientOptions::new().session_grace(GRACE);
    Client::open_with(url, options).await.expect("connect")
}

/// The election `e` as `candidate`.
fn election(client: &Client, candidate: &str) -> Election {
    Election::new(client, "e", TTL).with_candidate(candidate)
}

/// `candidate` leads `e` now, proclaiming `value`.
async fn leads(client: &Client, candidate: &str, value: &str) -> Leadership {
    let campaign = election(client, candidate).try_campaign(value).await;
    campaign.expect("campaign").expect("nobody led")
}

/// A candidate of its own client campaigning for `e` up to 10 s: its leadership, and when its
/// campaign returned.
async fn waiting_candidate(
    url: &str,
    candidate: &'static str,
) -> tokio::task::JoinHandle<(Option<Leadership>, Instant)> {
    let client = connect(url).await;
    tokio::spawn(async move {
        let election = election(&client, candidate);
        let campaign = election.campaign_timeout(candidate, Duration::from_secs(10));
        let leadership = campaign.await.expect("campaign");
        (leadership, Instant::now())
    })
}

/// A state in which `candidate` leads with `value`.
fn led_by(state: &LeaderState, candidate: &str, value: &str) -> bool {
    state.leader.as_deref() == Some(candidate) && state.value == value && state.epoch > 0
}

/// A field of `INFO lock`.
fn lock_field(con: &mut redis::Connection, field: &str) -> u64 {
    let value = info_field(con, "lock", field);
    value.and_then(|v| v.trim().parse().ok()).expect(field)
}

/// A connection of its own campaigning for `e` as `candidate` (`LOCK.CAMPAIGN ... WAIT`, no
/// session): its client id and the thread that returns its reply (the epoch, or `None`).
fn raw_candidate(server: &Server, candidate: &str) -> (i64, JoinHandle<Option<u64>>) {
    let mut con = server.client();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).expect("ID");
    let mut command = redis::cmd("LOCK.CAMPAIGN");
    command
        .arg("e")
        .arg(candidate)
        .arg(candidate)
        .arg(60_000)
        .arg("WAIT")
        .arg(20_000);
    let reply = std::thread::spawn(move || command.query(&mut con).expect("LOCK.CAMPAIGN"));
    (id, reply)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_candidate_campaigns_leads_proclaims_and_resigns() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = connect(&server.url()).await;
    let a = election(&client, "host-a");
    assert!(a.leader().await.expect("leader").is_vacant());

    let mut leadership = leads(&client, "host-a", "10.0.0.1:8080").await;
    let epoch = leadership.epoch();
    assert!(epoch > 0);
    assert_eq!(leadership.candidate(), "host-a");
    assert_eq!(leadership.value(), "10.0.0.1:8080");
    assert!(leadership.is_held());
    let state = a.leader().await.expect("leader");
    assert!(led_by(&state, "host-a", "10.0.0.1:8080"), "{state:?}");
    assert_eq!(state.epoch, epoch);
    assert!(state.ttl.is_some_and(|ttl| ttl <= TTL && ttl > TTL - SOON));
    let session = client.session_id().expect("a session");
    let tied = common::info_fields(&mut con, "e").expect("held");
    assert_eq!(
        tied.get("session"),
        Some(&Value::BulkString(session.into_bytes())),
        "tied to the client's session"
    );

    // Another candidate does not lead while host-a does.
    let other = election(&client, "host-b").try_campaign("b").await;
    assert!(other.expect("campaign").is_none());

    assert!(
        leadership
            .proclaim("10.0.0.1:9090")
            .await
            .expect("proclaim")
    );
    assert_eq!(leadership.value(), "10.0.0.1:9090");
    let state = a.leader().await.expect("leader");
    assert!(led_by(&state, "host-a", "10.0.0.1:9090"), "{state:?}");
    assert_eq!(state.epoch, epoch, "the same term");

    // A new candidate per campaign by default: it shows in LOCK.LEADER.
    let unnamed = Election::new(&client, "u", TTL).try_campaign("x").await;
    let unnamed = unnamed.expect("campaign").expect("free");
    let shown = Election::new(&client, "u", TTL).leader().await.expect("u");
    assert_eq!(shown.leader.as_deref(), Some(unnamed.candidate()));
    assert!(unnamed.resign().await.expect("resign"));

    // The same candidate campaigning again keeps its term (what a campaign whose reply was
    // lost does): the same epoch, its new value.
    let again = leads(&client, "host-a", "10.0.0.1:7070").await;
    assert_eq!(again.epoch(), epoch);
    let state = a.leader().await.expect("leader");
    assert!(led_by(&state, "host-a", "10.0.0.1:7070"), "{state:?}");
    assert_eq!(state.epoch, epoch);
    assert!(again.resign().await.expect("resign"));
    assert!(a.leader().await.expect("leader").is_vacant());
    let lost = leadership.lost_signal();
    assert!(!leadership.resign().await.expect("resign"), "ended already");
    assert!(!lost.is_held(), "resigned: no longer held");
    let twice = call(&mut con, &["LOCK.RESIGN", "e", &epoch.to_string()]);
    assert_eq!(twice, Value::Int(0), "the term had ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_syncing_off_a_term_is_tied_to_the_session_it_names() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = connect(&server.url()).await;
    let unsynced = election(&client, "host-a").with_sync(Sync::off());
    let campaign = unsynced.try_campaign("a").await.expect("campaign");
    let mut leadership = campaign.expect("nobody led");
    let session = client.session_id().expect("a session");
    let tied = common::info_fields(&mut con, "e").expect("held");
    assert_eq!(
        tied.get("session"),
        Some(&Value::BulkString(session.into_bytes()))
    );
    assert!(leadership.proclaim("b").await.expect("proclaim"));
    let state = unsynced.leader().await.expect("leader");
    assert!(led_by(&state, "host-a", "b"), "{state:?}");
    assert_eq!(state.epoch, leadership.epoch());
    let waiting = waiting_candidate(&server.url(), "host-b").await;
    queued(&mut con, "e", 1);
    client.close().await.expect("close the session");
    timeout(SOON, leadership.lost()).await.expect("told");
    let (next, _) = timeout(SOON, waiting).await.expect("soon").expect("task");
    assert!(next.expect("host-b leads").epoch() > state.epoch);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_candidate_leads_at_once_after_a_resignation_with_a_larger_epoch() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = connect(&server.url()).await;
    let leadership = leads(&client, "host-a", "a").await;
    let waiting = waiting_candidate(&server.url(), "host-b").await;
    queued(&mut con, "e", 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "host-b waits while host-a leads");

    let first = leadership.epoch();
    let resigned = Instant::now();
    assert!(leadership.resign().await.expect("resign"));
    let (next, led_at) = timeout(SOON, waiting).await.expect("soon").expect("task");
    let next = next.expect("host-b leads");
    assert!(
        led_at - resigned < Duration::from_millis(200),
        "led {:?} after the resignation",
        led_at - resigned
    );
    assert!(next.epoch() > first, "a larger epoch");
    let state = election(&client, "x").leader().await.expect("leader");
    assert!(led_by(&state, "host-b", "host-b"), "{state:?}");
    assert_eq!(state.epoch, next.epoch());
    assert!(next.resign().await.expect("resign"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_epoch_proclaims_and_resigns_nothing_and_the_later_term_stays() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = connect(&server.url()).await;
    let mut stale = leads(&client, "host", "old").await;
    let old = stale.epoch();

    // Its term ends behind its back; the same candidate, in another process, leads again: a
    // new term, with a larger epoch (a release by name would end it, a resignation by epoch
    // does not).
    let ended = call(&mut con, &["LOCK.RESIGN", "e", &old.to_string()]);
    assert_eq!(ended, Value::Int(1));
    let other = connect(&server.url()).await;
    let later = leads(&other, "host", "new").await;
    assert!(later.epoch() > old);

    assert!(
        !stale.proclaim("overwritten?").await.expect("proclaim"),
        "a stale epoch is refused"
    );
    assert_eq!(stale.value(), "old");
    timeout(SOON, stale.lost()).await.expect("counted as lost");
    assert!(!stale.is_held());
    assert!(
        !stale.proclaim("again").await.expect("proclaim"),
        "lost: refused"
    );
    let lost_epoch = stale.epoch();
    assert!(!stale.resign().await.expect("resign"), "a stale epoch");

    let state = election(&client, "x").leader().await.expect("leader");
    assert!(led_by(&state, "host", "new"), "nothing changed: {state:?}");
    assert_eq!(state.epoch, later.epoch());
    assert!(later.is_held());
    let proclaimed = call(
        &mut con,
        &["LOCK.PROCLAIM", "e", &lost_epoch.to_string(), "x"],
    );
    assert_eq!(proclaimed, Value::Int(0));
    assert!(later.resign().await.expect("resign"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_observer_is_told_nobody_then_the_leader_its_new_value_nobody_and_the_next_leader() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = connect(&server.url()).await;
    let watcher = connect(&server.url()).await;
    let mut states = election(&watcher, "x").observe().into_stream();
    let mut next = async || {
        let state = timeout(SOON, states.next()).await.expect("a state in time");
        state.expect("never ends").expect("observe")
    };
    assert_eq!(next().await, LeaderState::vacant(), "nobody leads yet");

    let mut a = leads(&client, "host-a", "a1").await;
    let state = next().await;
    assert!(led_by(&state, "host-a", "a1"), "{state:?}");
    assert_eq!(state.epoch, a.epoch());
    assert!(state.ttl.is_some());

    assert!(a.proclaim("a2").await.expect("proclaim"));
    let state = next().await;
    assert!(led_by(&state, "host-a", "a2"), "{state:?}");
    assert_eq!(state.epoch, a.epoch(), "the same term");

    // host-b waits; host-a resigns and host-b leads in the same step: the vacancy comes first.
    let waiting = waiting_candidate(&server.url(), "host-b").await;
    queued(&mut con, "e", 1);
    let first = a.epoch();
    assert!(a.resign().await.expect("resign"));
    let state = next().await;
    assert!(state.is_vacant(), "the vacancy first: {state:?}");
    assert_eq!(state.ttl, None);
    let state = next().await;
    assert!(led_by(&state, "host-b", "host-b"), "{state:?}");
    assert!(state.epoch > first);
    let (b, _) = waiting.await.expect("task");
    let b = b.expect("host-b leads");
    assert_eq!(state.epoch, b.epoch());

    assert!(b.resign().await.expect("resign"));
    assert!(next().await.is_vacant());
    // Nothing changes: nothing more is told.
    let quiet = timeout(Duration::from_millis(500), states.next()).await;
    assert!(quiet.is_err(), "told {quiet:?}");
}

/// Not a test of its own: the leader process of
/// [`a_leader_killed_with_kill_9_is_replaced_a_grace_later_and_observers_see_the_vacancy_first`],
/// which runs this test binary again with only this test and [`LEADER_URL`] set. It leads `e`
/// as `host-a` with sessions of [`GRACE`], prints `LEADING <epoch>` and sleeps until it is
/// killed. Without the variable it does nothing.
#[test]
fn leader_process() {
    let Ok(url) = std::env::var(LEADER_URL) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = connect(&url).await;
        let leadership = leads(&client, "host-a", "a").await;
        let mut out = std::io::stdout();
        writeln!(out, "LEADING {}", leadership.epoch()).expect("stdout");
        out.flush().expect("stdout");
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(leadership);
    });
}

/// Starts an observer of `e` on a client of its own: the first `count` states it is told, each
/// with when.
async fn observed(url: &str, count: usize) -> tokio::task::JoinHandle<Vec<(LeaderState, Instant)>> {
    let watcher = connect(url).await;
    let mut observer = election(&watcher, "x").observe();
    tokio::spawn(async move {
        let mut told = Vec::new();
        while told.len() < count {
            let state = observer.next().await.expect("observe");
            told.push((state, Instant::now()));
        }
        told
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_killed_with_kill_9_is_replaced_a_grace_later_and_observers_see_the_vacancy_first()
{
    let server = Server::start(&[]);
    let mut con = server.client();
    let url = server.url();
    let (child, epoch) = tokio::task::spawn_blocking(move || {
        common::test_process("leader_process", (LEADER_URL, &url), "LEADING ")
    })
    .await
    .expect("the leader process");
    let told = observed(&server.url(), 3).await;
    let waiting = waiting_candidate(&server.url(), "host-b").await;
    queued(&mut con, "e", 1);

    let killed = Instant::now();
    drop(child); // kill -9
    let (next, led_at) = timeout(SOON, waiting).await.expect("soon").expect("task");
    let next = next.expect("host-b leads");
    let took = led_at - killed;
    assert!(
        took >= GRACE - Duration::from_millis(50) && took <= GRACE + Duration::from_millis(100),
        "host-b led {took:?} after the kill, with a grace of {GRACE:?}"
    );
    assert!(next.epoch() > epoch, "a larger epoch");
    let told = timeout(SOON, told).await.expect("in time").expect("task");
    let states: Vec<&LeaderState> = told.iter().map(|(state, _)| state).collect();
    assert!(led_by(states[0], "host-a", "a"), "{states:?}");
    assert_eq!(states[0].epoch, epoch);
    assert!(states[1].is_vacant(), "the vacancy first: {states:?}");
    assert!(led_by(states[2], "host-b", "host-b"), "{states:?}");
    assert_eq!(states[2].epoch, next.epoch());
    assert_eq!(lock_field(&mut con, "lock_sessions_expired"), 1);
    assert!(next.resign().await.expect("resign"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_off_is_told_it_lost_before_the_next_candidate_leads_a_grace_later() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let proxy = LinkProxy::to(server.port);
    let cut_off = connect(&format!("redis://127.0.0.1:{}", proxy.port)).await;
    let leadership = leads(&cut_off, "host-a", "a").await;
    let lost = leadership.lost_signal();
    let lost_at = tokio::spawn(async move {
        lost.wait().await;
        Instant::now()
    });
    let told = observed(&server.url(), 3).await;
    let waiting = waiting_candidate(&server.url(), "host-b").await;
    queued(&mut con, "e", 1);
    // Renewals and heartbeats go on through the proxy: still the leader after several.
    tokio::time::sleep(GRACE * 2).await;
    assert!(leadership.is_held());

    let cut = Instant::now();
    proxy.cut();
    let lost_at = timeout(SOON, lost_at).await.expect("told").expect("task");
    let (next, led_at) = timeout(SOON, waiting).await.expect("soon").expect("task");
    let next = next.expect("host-b leads");
    assert!(
        lost_at < led_at,
        "lost {:?} after the cut, host-b led {:?} after it",
        lost_at - cut,
        led_at - cut
    );
    assert!(
        lost_at - cut <= GRACE,
        "lost {:?} after the cut",
        lost_at - cut
    );
    assert!(
        led_at - cut >= GRACE && led_at - cut <= GRACE + Duration::from_millis(200),
        "host-b led {:?} after the cut, with a grace of {GRACE:?}",
        led_at - cut
    );
    assert!(next.epoch() > leadership.epoch(), "a larger epoch");
    assert!(!leadership.is_held());
    assert_eq!(lock_field(&mut con, "lock_sessions_expired"), 1);

    let told = timeout(SOON, told).await.expect("in time").expect("task");
    let states: Vec<&LeaderState> = told.iter().map(|(state, _)| state).collect();
    assert!(led_by(states[0], "host-a", "a"), "{states:?}");
    assert!(states[1].is_vacant(), "the vacancy first: {states:?}");
    assert!(led_by(states[2], "host-b", "host-b"), "{states:?}");
    assert_eq!(states[2].epoch, next.epoch());
    assert!(told[1].1 >= cut + GRACE - Duration::from_millis(50));
    assert!(next.resign().await.expect("resign"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_blip_within_the_grace_keeps_the_term() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let admin: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).expect("ID");
    let client = connect(&server.url()).await;
    // A short lease: renewals every 333 ms, through the blips.
    let leader = Election::new(&client, "e", Duration::from_secs(1)).with_candidate("host-a");
    let leadership = leader.try_campaign("a").await.expect("campaign");
    let leadership = leadership.expect("nobody led");
    let epoch = leadership.epoch();
    let (waiter, waiting) = raw_candidate(&server, "host-b");
    queued(&mut con, "e", 1);

    for _ in 0..3 {
        // Every connection of the leader's client: its session's, its pools', its shared one.
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut con)
            .expect("LIST");
        let ids: Vec<i64> = list
            .lines()
            .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
            .filter(|id| *id != admin && *id != waiter)
            .collect();
        assert!(!ids.is_empty());
        for id in ids {
            let _ = call(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]);
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(leadership.is_held(), "not told it lost the term");
    let state = leader.leader().await.expect("leader");
    assert!(led_by(&state, "host-a", "a"), "{state:?}");
    assert_eq!(state.epoch, epoch, "the same term");
    assert_eq!(waiters(&mut con, "e"), 1, "host-b still waits");
    assert_eq!(lock_field(&mut con, "lock_sessions_expired"), 0);

    assert!(
        leadership
            .resign()
            .await
            .expect("resign after reconnecting")
    );
    let next = waiting
        .join()
        .expect("host-b's thread")
        .expect("host-b leads");
    assert!(next > epoch);
}

#[tokio::test(flavor = "multi_thread")]
async fn elections_work_on_every_master_of_a_cluster() {
    let nodes = common::cluster::cluster();
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::cluster(&seeds).await.expect("cluster");
    let names: Vec<String> = (0..12).map(|i| format!("leader:{i}")).collect();
    for node in &nodes {
        let serves = |name: &String| common::cluster::serves(node, name);
        assert!(names.iter().any(serves), "an election on every master");
    }
    for name in &names {
        let election = Election::new(&client, name, TTL).with_candidate("host-a");
        let mut observer = election.observe();
        let mut next = async || {
            let state = timeout(SOON, observer.next()).await.expect("in time");
            state.expect("observe")
        };
        assert!(next().await.is_vacant(), "{name}");
        let campaign = election.try_campaign("a").await.expect("campaign");
        let mut leadership = campaign.expect("nobody led");
        assert!(led_by(&next().await, "host-a", "a"), "{name}");
        assert!(leadership.proclaim("b").await.expect("proclaim"), "{name}");
        let state = next().await;
        assert!(led_by(&state, "host-a", "b"), "{name}: {state:?}");
        let leader = election.leader().await.expect("leader");
        assert!(led_by(&leader, "host-a", "b") && leader.epoch == state.epoch);

        let other = Election::new(&client, name, TTL).with_candidate("host-b");
        let waiting = tokio::spawn(async move {
            let campaign = other.campaign_timeout("c", Duration::from_secs(5)).await;
            campaign.expect("campaign").expect("host-b leads")
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let first = leadership.epoch();
        assert!(leadership.resign().await.expect("resign"), "{name}");
        assert!(next().await.is_vacant(), "{name}: the vacancy first");
        let state = next().await;
        assert!(led_by(&state, "host-b", "c"), "{name}: {state:?}");
        let next_leader = timeout(SOON, waiting).await.expect("soon").expect("task");
        assert!(next_leader.epoch() > first && next_leader.epoch() == state.epoch);
        assert!(next_leader.resign().await.expect("resign"), "{name}");
        assert!(next().await.is_vacant(), "{name}");
    }
}
