//! A Sentinel-managed group on loopback: a master and two replicas with the module, watched
//! by three Sentinels, and the record of every master they promote or announce.
//!
//! Everyone — Sentinels, replicas, clients — reaches a data server through a TCP proxy of its
//! own (the server announces the proxy's port with `replica-announce-port`), so cutting the
//! proxy cuts the server off from all of them, as a network partition would, while it keeps
//! running. Each server also connects out (to its master) from a loopback address of its own
//! (`bind-source-addr`, [`Group::source`]), and a proxy knows the Sentinels' connections by
//! their names, so a proxy can refuse one server, or the Sentinels, only: one replica's link to its
//! master can be cut while the Sentinels, the clients and the other replica still reach both
//! ([`Group::cut_link`]), and some servers can be cut off from the Sentinels and the other
//! servers while the clients still reach everyone ([`Group::partition`]).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::history::History;
use super::proxy::LinkProxy;
use super::{Server, call, info_field, wait_until, wait_within};

/// The name the Sentinels monitor the master under.
pub const MASTER_NAME: &str = "leasehold";

/// `lock.restart-delay-ms` for a server back with its volume lost ([`Group::restart`]): above
/// the longest lease the tests' clients take (`tests/chaos.rs`: 5 s for its killed holders).
pub const LOST_VOLUME_RESTART_DELAY_MS: u64 = 10_000;

/// How the Sentinels time a failover: how long the master must be unreachable before they
/// fail it over (`down-after-milliseconds`), and `failover-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `down-after-milliseconds`.
    pub down_after_ms: u64,
    /// `failover-timeout`.
    pub failover_timeout_ms: u64,
}

impl Timing {
    /// Most tests': a failover within seconds.
    pub const FAST: Self = Self {
        down_after_ms: 1_000,
        failover_timeout_ms: 3_000,
    };
    /// Sentinel's own defaults (`sentinel.conf`).
    pub const DEFAULT: Self = Self {
        down_after_ms: 30_000,
        failover_timeout_ms: 180_000,
    };
    /// `down-after-milliseconds 5000` with the default `failover-timeout`.
    pub const FIVE_SECONDS: Self = Self {
        down_after_ms: 5_000,
        failover_timeout_ms: 180_000,
    };
}

/// How a data server keeps its data, and so how it comes back after `kill -9`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// `appendonly yes`, `appendfsync everysec`: up to a second of writes lost.
    Aof,
    /// RDB snapshots every second with a change (and the RDB a replica keeps from its last
    /// full sync): it comes back from a stale snapshot.
    Rdb,
    /// None (`save ""`, `appendonly no`): it comes back with the RDB it kept from its last
    /// full sync as a replica, or — its volume lost — empty.
    Nothing,
}

/// The data servers (index 0 the first master), their proxies, and their Sentinels.
pub struct Group {
    pub servers: Vec<Server>,
    pub persistence: Vec<Persistence>,
    proxies: Vec<LinkProxy>,
    /// The source addresses each server's proxy refuses ([`Group::cut_link`],
    /// [`Group::partition`]).
    refused: Vec<HashSet<IpAddr>>,
    /// Whether each server's proxy refuses the Sentinels ([`Group::partition`]).
    sentinels_refused: Vec<bool>,
    /// The servers killed for good ([`Group::lose`]): the group settles without them.
    lost: HashSet<usize>,
    /// The port everyone reaches each server on: its proxy's.
    pub addresses: Vec<u16>,
    pub sentinels: Vec<Server>,
    /// `(µs since the history began, new master's address, announced)` for each master the
    /// Sentinels named: promoted (timed when they sent it `REPLICAOF NO ONE`), or announced at
    /// the end of a failover (`+switch-master`, or the `FAILOVER` command's promotion).
    switches: Named,
}

/// `(µs since the history began, new master's address, announced)` for each master the
/// Sentinels named, shared with the threads that listen to them.
type Named = Arc<Mutex<Vec<(u64, u16, bool)>>>;

impl Group {
    /// Starts the servers (AOF master, RDB replica, replica with nothing) behind their proxies
    /// and three Sentinels (quorum 2) with [`Timing::FAST`], and waits until every Sentinel
    /// knows both replicas and the other two. Switches are timed on `history`'s clock.
    pub fn start(history: &Arc<History>) -> Self {
        Self::with(history, &[], Timing::FAST)
    }

    /// Like [`Group::start`], every server loading the module with `module_args`
    /// (`["restart-delay-ms", "1000"]`), the Sentinels timed by `timing`.
    pub fn with(history: &Arc<History>, module_args: &[&str], timing: Timing) -> Self {
        Self::new(history, Some(module_args), timing, false)
    }

    /// Like [`Group::with`], no server loading the module: Redis and Sentinel alone.
    pub fn without_module(history: &Arc<History>, timing: Timing) -> Self {
        Self::new(history, None, timing, false)
    }

    /// Like [`Group::with`] (`None`: [`Group::without_module`]), every server and Sentinel on
    /// TLS alone ([`Server::tls`], [`Server::tls_sentinel`]); the proxies pass TLS through.
    /// A proxy cannot read which connections are the Sentinels' (their names are encrypted),
    /// so [`Group::partition`] cuts the servers of its side off from the other servers only.
    pub fn tls(history: &Arc<History>, module_args: Option<&[&str]>, timing: Timing) -> Self {
        Self::new(history, module_args, timing, true)
    }

    fn new(
        history: &Arc<History>,
        module_args: Option<&[&str]>,
        timing: Timing,
        tls: bool,
    ) -> Self {
        let persistence = vec![Persistence::Aof, Persistence::Rdb, Persistence::Nothing];
        // The proxies' ports are bound before the servers start, so that no server or
        // connection takes one of them before its proxy does.
        let listeners: Vec<TcpListener> =
            persistence.iter().map(|_| LinkProxy::listen(0)).collect();
        let addresses: Vec<u16> = listeners
            .iter()
            .map(|listener| listener.local_addr().expect("proxy address").port())
            .collect();
        let servers: Vec<Server> = persistence
            .iter()
            .zip(&addresses)
            .enumerate()
            .map(|(index, (kept, address))| {
                let announce = address.to_string();
                let source = Self::source(index).to_string();
                let announced = [
                    "--replica-announce-ip",
                    "127.0.0.1",
                    "--replica-announce-port",
                    &announce,
                    "--bind-source-addr",
                    &source,
                ];
                let kept: &[&str] = match kept {
                    Persistence::Aof => &["--appendonly", "yes"],
                    Persistence::Rdb => &["--save", "1 1"],
                    Persistence::Nothing => &[],
                };
                Server::data(module_args, &[&announced[..], kept].concat(), tls)
            })
            .collect();
        let proxies: Vec<LinkProxy> = servers
            .iter()
            .zip(listeners)
            .map(|(server, listener)| LinkProxy::on(listener, server.port))
            .collect();
        for replica in &servers[1..] {
            replica.replicate_through(addresses[0]);
        }
        // A replica is promotable only once the master took it into its in-sync set; the
        // Sentinels read its priority when they first see it, so they start after that.
        for replica in servers[1..].iter().filter(|_| module_args.is_some()) {
            let mut con = replica.client();
            wait_until("the replica is in the in-sync set", || {
                info_field(&mut con, "lock", "lock_insync_promotable").as_deref() == Some("1")
            });
        }
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {}\n\
             sentinel failover-timeout {MASTER_NAME} {}\n\
             sentinel parallel-syncs {MASTER_NAME} 2\n",
            addresses[0], timing.down_after_ms, timing.failover_timeout_ms
        );
        let sentinels: Vec<Server> = (0..3).map(|_| Server::sentinel_on(&config, tls)).collect();
        for sentinel in &sentinels {
            let mut con = sentinel.client();
            // Sentinels read their master's INFO every 10 s (the replicas) and hear each other
            // every 2 s: a loaded machine can take twice that.
            wait_within(
                Duration::from_secs(60),
                "the Sentinels know the group",
                || {
                    let mut count =
                        |what: &str| match call(&mut con, &["SENTINEL", what, MASTER_NAME]) {
                            redis::Value::Array(entries) => entries.len(),
                            _ => 0,
                        };
                    count("replicas") == 2 && count("sentinels") == 2
                },
            );
        }
        let switches = Arc::new(Mutex::new(Vec::new()));
        for sentinel in &sentinels {
            watch_switches(sentinel, history, &switches);
        }
        Self {
            servers,
            persistence,
            proxies,
            refused: vec![HashSet::new(); 3],
            sentinels_refused: vec![false; 3],
            lost: HashSet::new(),
            addresses,
            sentinels,
            switches,
        }
    }

    /// `redis://` URLs of the Sentinels, for Sentinel-aware clients (`rediss://` on TLS: such
    /// a client must present [`super::tls::certificates`]).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The masters the Sentinels named so far, each when first named (promoted, or announced),
    /// in time order.
    pub fn switches(&self) -> Vec<(u64, u16)> {
        let mut heard: Vec<(u64, u16)> = self
            .switches
            .lock()
            .expect("switches")
            .iter()
            .map(|(at, port, _)| (*at, *port))
            .collect();
        heard.sort_unstable();
        heard.dedup_by(|later, earlier| later.1 == earlier.1);
        heard
    }

    /// The index of the server a majority of the Sentinels name as master. One Sentinel's
    /// answer is not enough: a Sentinel still in a failover names the replica it promoted until
    /// it sees every replica follow it, up to `failover-timeout` (180 s by default) when that
    /// server dies or is demoted meanwhile, while the others already name the master of a later
    /// failover (`sentinelGetCurrentMasterAddress` in Sentinel's source).
    pub fn master(&self) -> Option<usize> {
        let named: Vec<usize> = self
            .views()
            .into_iter()
            .flatten()
            .map(|view| view.0)
            .collect();
        named.iter().copied().find(|candidate| {
            2 * named.iter().filter(|other| *other == candidate).count() > self.sentinels.len()
        })
    }

    /// What each Sentinel answers, in order, `None` for one that does not: the index of the
    /// server it names master, and whether it is in a failover of the group (the
    /// `failover_in_progress` flag of `SENTINEL MASTER`).
    fn views(&self) -> Vec<Option<(usize, bool)>> {
        self.sentinels
            .iter()
            .map(|sentinel| {
                let mut con = sentinel.try_client().ok()?;
                let (_, port): (String, u16) = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME)
                    .query(&mut con)
                    .ok()?;
                let fields: Vec<String> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(MASTER_NAME)
                    .query(&mut con)
                    .ok()?;
                let flags = fields.iter().skip_while(|field| *field != "flags").nth(1)?;
                let named = self.addresses.iter().position(|known| *known == port)?;
                Some((named, flags.contains("failover_in_progress")))
            })
            .collect()
    }

    /// Asks the Sentinels in turn for `SENTINEL FAILOVER` of the group, as an operator would,
    /// until one takes it (a Sentinel still finishing an earlier failover, waiting for a
    /// replica to follow, answers `INPROG`); the last answer.
    pub fn sentinel_failover(&self) -> redis::RedisResult<()> {
        let mut answer = Ok(());
        for sentinel in &self.sentinels {
            answer = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .exec(&mut sentinel.client());
            if answer.is_ok() {
                break;
            }
        }
        answer
    }

    /// The servers whose `INFO lock` names a command to run now (`lock_insync_to_run`). Panics
    /// if more than one does: a person who ran each would make two masters.
    pub fn naming(&self) -> Option<usize> {
        let named: Vec<usize> = (0..self.servers.len())
            .filter(|&index| {
                !self.lost.contains(&index)
                    && self.servers[index].try_client().is_ok_and(|mut con| {
                        info_field(&mut con, "lock", "lock_insync_to_run")
                            .is_some_and(|command| !command.is_empty())
                    })
            })
            .collect();
        assert!(
            named.len() <= 1,
            "servers {named:?} each name a command to run: {}",
            self.describe()
        );
        named.first().copied()
    }

    /// Runs `REPLICAOF NO ONE` on the server whose `INFO lock` names it (`lock_insync_to_run`: a
    /// successor in a replication cycle), as the person on call would; returns which server, if
    /// any. Panics if two name it ([`Group::naming`]), or if the module then refuses it.
    pub fn run_what_the_module_names(&self) -> Option<usize> {
        let named = self.naming()?;
        let ran: redis::RedisResult<()> = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.servers[named].client());
        ran.expect("the server INFO lock names may be promoted");
        Some(named)
    }

    /// Waits up to `within` for the group to settle after a fault: every Sentinel names the
    /// same master and none is still in a failover, that server reports the master role, and
    /// every other server is its replica with the link up. True if it did.
    pub fn settle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let views = self.views();
            let agreed = views
                .first()
                .copied()
                .flatten()
                .filter(|first| !first.1 && views.iter().all(|view| *view == Some(*first)));
            if agreed.is_some_and(|(master, _)| self.settled_under(master)) {
                return true;
            }
            thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn settled_under(&self, master: usize) -> bool {
        let mut live = self
            .servers
            .iter()
            .enumerate()
            .filter(|(index, _)| !self.lost.contains(index));
        live.all(|(index, server)| {
            let Ok(mut con) = server.try_client() else {
                return false;
            };
            let mut field = |name: &str| info_field(&mut con, "replication", name);
            if index == master {
                return field("role").as_deref() == Some("master");
            }
            field("role").as_deref() == Some("slave")
                && field("master_port") == Some(self.addresses[master].to_string())
                && field("master_link_status").as_deref() == Some("up")
        })
    }

    /// Waits up to `within` for the Sentinels to name a master other than `old`; true if
    /// they did.
    pub fn wait_for_failover(&self, old: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.master().is_some_and(|master| master != old) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits up to `within` for a Sentinel to announce `+switch-master` to server `index`, the
    /// end of a failover (the Sentinels name the new master earlier, while they still
    /// reconfigure the replicas); true if one did.
    pub fn wait_for_switch_to(&self, index: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let last = self
                .switches
                .lock()
                .expect("switches")
                .iter()
                .copied()
                .filter(|(_, _, announced)| *announced)
                .max();
            if last.map(|(_, port, _)| port) == Some(self.addresses[index]) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits up to `within` for server `index` to report the master role (after the `FAILOVER`
    /// command, which the Sentinels learn of only later), and records the switch to it then.
    pub fn follow_promotion(&self, index: usize, history: &History, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let Ok(mut con) = self.servers[index].try_client() else {
            return false;
        };
        while Instant::now() < deadline {
            if info_field(&mut con, "replication", "role").as_deref() == Some("master") {
                let switch = (history.now_us(), self.addresses[index]);
                self.switches
                    .lock()
                    .expect("switches")
                    .push((switch.0, switch.1, true));
                return true;
            }
            thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Brings back a killed server with what its persistence kept, or — for a server without
    /// persistence that `lost_volume` — empty; with its own configuration (so as a master, until
    /// the Sentinels make it a replica of the master they know some seconds later), or as a
    /// replica of server `replica_of`. A volume lost takes the lease horizon's record with it,
    /// so such a server comes back as the configuration guide asks of one that can lose its
    /// volume: with `lock.restart-delay-ms` above the longest lease the tests take
    /// ([`LOST_VOLUME_RESTART_DELAY_MS`]).
    pub fn restart(&mut self, index: usize, lost_volume: bool, replica_of: Option<usize>) {
        let server = &mut self.servers[index];
        let mut extra: Vec<String> = Vec::new();
        if lost_volume && self.persistence[index] == Persistence::Nothing {
            server.wipe();
            if server.loads_module() {
                let delay = LOST_VOLUME_RESTART_DELAY_MS.to_string();
                extra.extend(["--lock.restart-delay-ms".to_owned(), delay]);
            }
        }
        if let Some(master) = replica_of {
            let port = self.addresses[master].to_string();
            extra.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned(), port]);
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        server.restart_with(&extra);
        self.proxies[index].down(false);
    }

    /// Restarts server `index` (a replica of server `master`) with the module loaded, as a
    /// rolling upgrade does: `SHUTDOWN`, then a start with `loadmodule` and `replicaof` added to
    /// its configuration.
    pub fn load_module(&mut self, index: usize, master: usize) {
        let port = self.addresses[master].to_string();
        let module = super::module_path().to_string_lossy().into_owned();
        let server = &mut self.servers[index];
        server.shutdown("NOSAVE");
        server.restart_with(&["--loadmodule", &module, "--replicaof", "127.0.0.1", &port]);
    }

    /// Cuts server `index` off from everyone: its proxy closes every connection and refuses
    /// new ones.
    pub fn cut_off(&mut self, index: usize) {
        self.proxies[index].cut();
    }

    /// Reconnects server `index` after [`Group::cut_off`].
    pub fn reconnect(&mut self, index: usize) {
        self.proxies[index] = LinkProxy::at(self.addresses[index], self.servers[index].port);
        for source in &self.refused[index] {
            self.proxies[index].refuse(*source);
        }
        self.proxies[index].refuse_sentinels(self.sentinels_refused[index]);
    }

    /// One line per server — its port, role, master, link, priority and in-sync set — and the
    /// master the Sentinels name: what a group that does not settle is stuck in.
    pub fn describe(&self) -> String {
        let mut lines = vec![format!(
            "Sentinels name {:?} (each: master, in a failover {:?})",
            self.master(),
            self.views()
        )];
        for (index, server) in self.servers.iter().enumerate() {
            if self.lost.contains(&index) {
                lines.push(format!("{index}: lost"));
                continue;
            }
            let Ok(mut con) = server.try_client() else {
                lines.push(format!("{index}: no answer"));
                continue;
            };
            let mut field = |section: &str, name: &str| {
                info_field(&mut con, section, name).unwrap_or_else(|| "-".into())
            };
            let role = field("replication", "role");
            let master = field("replication", "master_port");
            let link = field("replication", "master_link_status");
            let members = field("lock", "lock_insync_members");
            let promotable = field("lock", "lock_insync_promotable");
            let by = field("lock", "lock_insync_promotable_by");
            let cycle = field("lock", "lock_insync_replication_cycle");
            let priority = call(&mut con, &["CONFIG", "GET", "replica-priority"]);
            lines.push(format!(
                "{index} ({}): {role} of {master} link {link}, members [{members}], \
                 promotable {promotable} by {by}, cycle with [{cycle}], priority {priority:?}",
                self.addresses[index]
            ));
        }
        lines.join("; ")
    }

    /// Kills server `index` with `kill -9`; its address refuses everyone until it is back
    /// ([`Group::restart`]), so that nothing else that takes its port is reached through it.
    pub fn kill(&mut self, index: usize) {
        self.servers[index].kill();
        self.proxies[index].down(true);
    }

    /// Kills server `index` with `kill -9` for good: it never comes back, though a new one may
    /// take its place ([`Group::replace`]).
    pub fn lose(&mut self, index: usize) {
        self.kill(index);
        self.lost.insert(index);
    }

    /// Puts a new, empty server in the place of server `index`, lost for good, as an operator
    /// or an orchestrator would: the same address, no data, a replica of server `master`.
    pub fn replace(&mut self, index: usize, master: usize) {
        self.servers[index].wipe();
        self.restart(index, false, Some(master));
        self.lost.remove(&index);
    }

    /// Kills server `index` and brings it back at once with its original configuration — the
    /// first master as a master, the others as replicas of it — as a container or a templated
    /// configuration that Sentinel's `CONFIG REWRITE` did not reach would.
    pub fn restart_original(&mut self, index: usize) {
        self.kill(index);
        self.restart(index, false, (index != 0).then_some(0));
    }

    /// The servers not lost for good, other than `master`.
    pub fn live_replicas(&self, master: usize) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|index| *index != master && !self.lost.contains(index))
            .collect()
    }

    /// True while a server is lost for good (and not replaced).
    pub fn lost_any(&self) -> bool {
        !self.lost.is_empty()
    }

    /// The servers lost for good and not replaced.
    pub fn lost_servers(&self) -> Vec<usize> {
        self.lost.iter().copied().collect()
    }

    /// The loopback address server `index` connects out from: 127.0.0.2, 127.0.0.3, ...
    pub fn source(index: usize) -> IpAddr {
        let last = u8::try_from(index + 2).expect("a few servers");
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    /// Cuts server `index`'s links to the other servers (so, as a replica, to its master, now
    /// and after the Sentinels point it at another) while the Sentinels and clients still reach
    /// it: the other servers' proxies refuse its connections.
    pub fn cut_link(&mut self, index: usize) {
        let others: Vec<usize> = (0..self.servers.len()).filter(|o| *o != index).collect();
        for other in others {
            self.refuse(other, Self::source(index));
        }
    }

    /// A partition: the servers of `side` reach each other but neither the Sentinels nor the
    /// other servers, which reach each other and the Sentinels; the clients reach everyone.
    /// (With the master on `side` and a Sentinel beside each server this cannot happen: the
    /// Sentinels of `side` would be cut off with it. It is the layout `lock.insync-strict`
    /// is for.)
    pub fn partition(&mut self, side: &[usize]) {
        for index in 0..self.servers.len() {
            let inside = side.contains(&index);
            if inside {
                self.proxies[index].refuse_sentinels(true);
                self.sentinels_refused[index] = true;
            }
            for other in 0..self.servers.len() {
                if side.contains(&other) != inside {
                    self.refuse(index, Self::source(other));
                }
            }
        }
    }

    /// Ends [`Group::cut_link`] and [`Group::partition`]: every proxy takes every source again.
    pub fn heal(&mut self) {
        for proxy in &self.proxies {
            proxy.refuse_sentinels(false);
        }
        self.sentinels_refused = vec![false; self.proxies.len()];
        for (proxy, refused) in self.proxies.iter().zip(&mut self.refused) {
            for source in refused.drain() {
                proxy.admit(source);
            }
        }
    }

    fn refuse(&mut self, index: usize, source: IpAddr) {
        self.proxies[index].refuse(source);
        self.refused[index].insert(source);
    }
}

/// What `sentinel` reports of the replica on `port` of the master it monitors as `master_name`
/// (`SENTINEL REPLICAS`): the value of each of its fields (`slave-priority`,
/// `master-link-status`, ...), by name; `None` when it does not know that replica.
pub fn replica_fields(
    sentinel: &Server,
    master_name: &str,
    port: u16,
) -> Option<HashMap<String, String>> {
    let replicas = call(
        &mut sentinel.client(),
        &["SENTINEL", "REPLICAS", master_name],
    );
    let redis::Value::Array(replicas) = replicas else {
        return None;
    };
    replicas.iter().find_map(|replica| {
        let fields: Vec<String> = redis::from_redis_value(replica.clone()).ok()?;
        let fields: HashMap<String, String> = fields
            .chunks(2)
            .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
            .collect();
        (fields.get("port")? == &port.to_string()).then_some(fields)
    })
}

/// Records every master that `sentinel` names, on `history`'s clock: a replica it promoted
/// and the master it switched to at the end of a failover (`+switch-master`, some time later).
/// The promotion is what counts: from then on an old master still granting is a split brain,
/// though Sentinel announces the switch only once it reconfigured the other replicas. It is
/// timed when Sentinel sends the replica `REPLICAOF NO ONE`
/// (`+failover-state-send-slaveof-noone`), and recorded once Sentinel sees it done
/// (`+promoted-slave`, on its next `INFO` of the replica, up to a second later — in which the
/// new master already grants, and an old master back at once with its own configuration may
/// too).
fn watch_switches(sentinel: &Server, history: &Arc<History>, switches: &Named) {
    const SENT: &str = "+failover-state-send-slaveof-noone";
    let mut con = sentinel.client();
    let (history, switches) = (Arc::clone(history), Arc::clone(switches));
    thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        if pubsub
            .subscribe(&["+switch-master", "+promoted-slave", SENT])
            .is_err()
        {
            return;
        }
        // `+switch-master`: "<name> <old-ip> <old-port> <new-ip> <new-port>"; the other two:
        // "slave <ip>:<port> <ip> <port> @ <name> <master-ip> <master-port>". The thread ends
        // with the Sentinel.
        let mut sent_at: HashMap<u16, u64> = HashMap::new();
        while let Ok(message) = pubsub.get_message() {
            let heard_at = history.now_us();
            let payload: String = message.get_payload().unwrap_or_default();
            let channel = message.get_channel_name();
            let announced = channel == "+switch-master";
            let field = if announced { 4 } else { 3 };
            let Some(port) = payload.split(' ').nth(field).and_then(|p| p.parse().ok()) else {
                continue;
            };
            if channel == SENT {
                sent_at.insert(port, heard_at);
                continue;
            }
            let at = if announced {
                heard_at
            } else {
                sent_at.remove(&port).unwrap_or(heard_at)
            };
            switches
                .lock()
                .expect("switches")
                .push((at, port, announced));
        }
    });
}
