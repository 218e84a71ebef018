//! A Sentinel-managed group on loopback: a master and two replicas with the module, watched
//! by three Sentinels, and the record of every `+switch-master` they announce.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::history::History;
use super::{Server, call, wait_until};

/// The name the Sentinels monitor the master under.
pub const MASTER_NAME: &str = "leasehold";

/// How long the master must be unreachable before the Sentinels fail it over.
pub const DOWN_AFTER_MS: u64 = 1_000;

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

/// The data servers (index 0 the first master) and their Sentinels.
pub struct Group {
    pub servers: Vec<Server>,
    pub persistence: Vec<Persistence>,
    pub sentinels: Vec<Server>,
    /// `(µs since the history began, new master's port)` for each `+switch-master`.
    switches: Arc<Mutex<Vec<(u64, u16)>>>,
}

impl Group {
    /// Starts the servers (AOF master, RDB replica, replica with nothing) and three Sentinels
    /// (quorum 2), and waits until every Sentinel knows both replicas and the other two.
    /// Switches are timed on `history`'s clock.
    pub fn start(history: &Arc<History>) -> Self {
        let persistence = vec![Persistence::Aof, Persistence::Rdb, Persistence::Nothing];
        let servers: Vec<Server> = persistence
            .iter()
            .map(|kept| match kept {
                Persistence::Aof => Server::start(&["--appendonly", "yes"]),
                Persistence::Rdb => Server::start(&["--save", "1 1"]),
                Persistence::Nothing => Server::start(&[]),
            })
            .collect();
        for replica in &servers[1..] {
            replica.replicate(&servers[0]);
        }
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} 3000\n\
             sentinel parallel-syncs {MASTER_NAME} 2\n",
            servers[0].port
        );
        let sentinels: Vec<Server> = (0..3).map(|_| Server::sentinel(&config)).collect();
        for sentinel in &sentinels {
            let mut con = sentinel.client();
            wait_until("the Sentinels know the group", || {
                let mut count = |what: &str| match call(&mut con, &["SENTINEL", what, MASTER_NAME])
                {
                    redis::Value::Array(entries) => entries.len(),
                    _ => 0,
                };
                count("replicas") == 2 && count("sentinels") == 2
            });
        }
        let switches = Arc::new(Mutex::new(Vec::new()));
        for sentinel in &sentinels {
            watch_switches(sentinel, history, &switches);
        }
        Self {
            servers,
            persistence,
            sentinels,
            switches,
        }
    }

    /// `redis://` URLs of the Sentinels, for Sentinel-aware clients.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The switches so far, first announcement of each, in time order.
    pub fn switches(&self) -> Vec<(u64, u16)> {
        let mut heard = self.switches.lock().expect("switches").clone();
        heard.sort_unstable();
        heard.dedup_by(|later, earlier| later.1 == earlier.1);
        heard
    }

    /// The index of the server the Sentinels name as master, as far as the switches tell.
    pub fn master(&self) -> usize {
        let port = self
            .switches()
            .last()
            .map_or(self.servers[0].port, |(_, port)| *port);
        self.index_of(port)
    }

    /// The index of the data server on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.servers
            .iter()
            .position(|server| server.port == port)
            .expect("a server of the group")
    }

    /// Waits up to `within` for the Sentinels to name a master other than `old`; true if
    /// they did.
    pub fn wait_for_failover(&self, old: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.master() != old {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Brings back a killed server with what its persistence kept, or — for a server without
    /// persistence that `lost_volume` — empty. If the Sentinels failed it over meanwhile, they
    /// make it a replica of the new master.
    pub fn restart(&mut self, index: usize, lost_volume: bool) {
        if lost_volume && self.persistence[index] == Persistence::Nothing {
            self.servers[index].restart_empty();
        } else {
            self.servers[index].restart();
        }
    }
}

/// Records every `+switch-master` that `sentinel` announces, on `history`'s clock.
fn watch_switches(
    sentinel: &Server,
    history: &Arc<History>,
    switches: &Arc<Mutex<Vec<(u64, u16)>>>,
) {
    let mut con = sentinel.client();
    let (history, switches) = (Arc::clone(history), Arc::clone(switches));
    thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        if pubsub.subscribe("+switch-master").is_err() {
            return;
        }
        // "<name> <old-ip> <old-port> <new-ip> <new-port>"; the thread ends with the Sentinel.
        while let Ok(message) = pubsub.get_message() {
            let heard_at = history.now_us();
            let payload: String = message.get_payload().unwrap_or_default();
            if let Some(port) = payload.split(' ').nth(4).and_then(|p| p.parse().ok()) {
                switches.lock().expect("switches").push((heard_at, port));
            }
        }
    });
}
