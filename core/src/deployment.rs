//! Where the module runs, and how long a failover there takes to promote a replica: the rule
//! that the in-sync set's promotability lease must outlast ([`crate::insync`]), taken from the
//! deployment itself, never from a guess.
//!
//! - **Sentinel.** Every Sentinel that watches a server publishes a hello on the server's
//!   `__sentinel__:hello` channel every 2 s (`sentinelSendHello` in Redis's `sentinel.c`): its
//!   address, its run id and epoch, and the name, address and configuration epoch of the master
//!   it believes in ([`parse_hello`]). The module asks each Sentinel heard of for that master
//!   (`SENTINEL MASTER <name>`, [`sentinel_master`]), whose `down-after-milliseconds` is how long
//!   the master must be unreachable before a failover starts; Sentinel then takes about a
//!   second to agree the master is down (`SENTINEL is-master-down-by-addr` every second), up to
//!   a second of random delay before it starts, one or two to elect a leader and a moment to
//!   send `REPLICAOF NO ONE` ([`SENTINEL_ELECTION_MS`] in all).
//! - **Redis Cluster.** A master is marked failing once a majority of masters have not heard it
//!   for `cluster-node-timeout` (gossip spreads the reports within about half of it), then its
//!   replica waits 0.5 to 1 s, more by rank, and asks for votes: about twice the node timeout
//!   in all ([`cluster_failover_ms`]; `clusterHandleSlaveFailover` in `cluster.c`).
//!
//! [`Deployment`] gathers what was learned and answers with the longest failover time among
//! the sources in force ([`Deployment::failover`]); until anything is learned it assumes the
//! value kept from before a restart, or else Sentinel's defaults.
//!
//! The hellos also say which master the Sentinels name, at which configuration epoch (it grows
//! with every failover they complete). A master that finds the newest of them naming another
//! server has been replaced ([`Record`]): an old master back with its own configuration, or one
//! cut off while the Sentinels failed over. It follows the master named, as Sentinel itself
//! would some seconds later (`+convert-to-slave`, after 8 s of the master role): until then
//! Sentinel could name it master again — it takes any server that reports the master role as
//! promoted — without the writes the other master counted.

/// Sentinel's own default `down-after-milliseconds` (`SENTINEL_DEFAULT_DOWN_AFTER` in Redis's
/// `sentinel.c`), in ms: what the module assumes until it has learned anything.
pub const SENTINEL_DEFAULT_DOWN_AFTER_MS: u64 = 30_000;

/// What Sentinel takes after `down-after-milliseconds` to send `REPLICAOF NO ONE`, in ms:
/// agreeing the master is down (the other Sentinels are asked every second), a random start
/// delay of up to a second (`SENTINEL_MAX_DESYNC`), the leader's election and the choice of a
/// replica — about 1 to 3 s when the first election succeeds, with room to spare.
pub const SENTINEL_ELECTION_MS: u64 = 6_000;

/// What a Redis Cluster replica takes past twice `cluster-node-timeout` to win its election,
/// in ms: its delay of 0.5 to 1 s, a second per rank, the votes, and room for a loaded machine
/// (`tests/cluster.rs` saw 10 s and more at a 5 s node timeout under load).
pub const CLUSTER_ELECTION_MS: u64 = 5_000;

/// The longest failover time believed from any source, in ms (a day): what a hello or a
/// Sentinel's reply claims is bounded, since any client allowed to `PUBLISH` can send one.
pub const LARGEST_FAILOVER_MS: u64 = 86_400_000;

/// The most Sentinels kept at once: a group has a handful, and hellos from more (forged: any
/// client allowed to `PUBLISH` on the channel can send one) are ignored until some are forgotten.
pub const MAX_SENTINELS: usize = 64;

/// How long a Sentinel not heard from is still counted, in ms: 30 of its 2 s hellos missed.
pub const SENTINEL_FORGET_MS: u64 = 60_000;

/// How often a Sentinel's `down-after-milliseconds` is asked again, in ms, so that a changed
/// setting is followed; a Sentinel that did not answer is asked again after
/// [`SENTINEL_RETRY_MS`].
pub const SENTINEL_ASK_MS: u64 = 30_000;

/// How soon a Sentinel that did not answer is asked again, in ms.
pub const SENTINEL_RETRY_MS: u64 = 5_000;

/// The failover time with Sentinel's `down-after-milliseconds` of `down_after_ms`, in ms.
#[must_use]
pub const fn sentinel_failover_ms(down_after_ms: u64) -> u64 {
    down_after_ms.saturating_add(SENTINEL_ELECTION_MS)
}

/// The failover time with Redis Cluster's `cluster-node-timeout` of `node_timeout_ms`, in ms.
#[must_use]
pub const fn cluster_failover_ms(node_timeout_ms: u64) -> u64 {
    node_timeout_ms
        .saturating_mul(2)
        .saturating_add(CLUSTER_ELECTION_MS)
}

/// Where a failover time comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Nothing learned yet: Sentinel's default `down-after-milliseconds`.
    Default,
    /// Kept from before the last restart (what it was learned from, as [`Source::describe`]
    /// said then).
    Kept(String),
    /// The Sentinel at `address` (`ip:port`) watches this server's group with this
    /// `down-after-milliseconds`.
    Sentinel {
        /// The Sentinel's `ip:port`.
        address: String,
        /// Its `down-after-milliseconds` for this server's group.
        down_after_ms: u64,
    },
    /// This server's `cluster-node-timeout`.
    Cluster {
        /// The node timeout, in ms.
        node_timeout_ms: u64,
    },
}

impl Source {
    /// One line for `INFO lock` and the log: `default (Sentinel's down-after-milliseconds
    /// 30000)`, `sentinel 10.0.0.5:26379 down-after-milliseconds 5000`,
    /// `cluster-node-timeout 15000`, or `kept: <the line it was kept with>`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Default => format!(
                "default (Sentinel's down-after-milliseconds {SENTINEL_DEFAULT_DOWN_AFTER_MS})"
            ),
            Self::Kept(line) => {
                let line = line.strip_prefix("kept: ").unwrap_or(line);
                format!("kept: {line}")
            }
            Self::Sentinel {
                address,
                down_after_ms,
            } => format!("sentinel {address} down-after-milliseconds {down_after_ms}"),
            Self::Cluster { node_timeout_ms } => {
                format!("cluster-node-timeout {node_timeout_ms}")
            }
        }
    }
}

/// How long a failover takes to promote a replica, and what says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// From the master's death to a replica's promotion, in ms.
    pub ms: u64,
    /// Where the figure comes from.
    pub source: Source,
}

impl Failover {
    /// Sentinel's defaults: [`sentinel_failover_ms`] of [`SENTINEL_DEFAULT_DOWN_AFTER_MS`].
    #[must_use]
    pub const fn default_sentinel() -> Self {
        Self {
            ms: sentinel_failover_ms(SENTINEL_DEFAULT_DOWN_AFTER_MS),
            source: Source::Default,
        }
    }
}

/// A Sentinel's hello (`__sentinel__:hello`):
/// `ip,port,runid,current-epoch,master-name,master-ip,master-port,master-config-epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The Sentinel's `ip:port`.
    pub sentinel: String,
    /// The name the Sentinel monitors this server's group under.
    pub master_name: String,
    /// The master the Sentinel believes in, `ip:port`.
    pub master: String,
    /// That master's configuration epoch: it grows with every failover Sentinel completes.
    pub config_epoch: u64,
}

/// The most bytes of a hello read: Sentinel formats it into a 1 024-byte buffer plus an
/// address.
pub const MAX_HELLO: usize = 1_100;

/// Reads a Sentinel's hello; `None` for anything else (wrong field count, bad numbers, a port
/// outside 1 to 65 535, a payload over [`MAX_HELLO`] bytes).
#[must_use]
pub fn parse_hello(payload: &[u8]) -> Option<Hello> {
    if payload.len() > MAX_HELLO {
        return None;
    }
    let text = std::str::from_utf8(payload).ok()?;
    let fields: Vec<&str> = text.split(',').collect();
    let [
        ip,
        port,
        _runid,
        epoch,
        name,
        master_ip,
        master_port,
        config_epoch,
    ] = fields[..]
    else {
        return None;
    };
    let port_of = |text: &str| text.parse::<u16>().ok().filter(|port| *port > 0);
    let (port, master_port) = (port_of(port)?, port_of(master_port)?);
    epoch.parse::<u64>().ok()?;
    if ip.is_empty() || name.is_empty() || master_ip.is_empty() {
        return None;
    }
    Some(Hello {
        sentinel: format!("{ip}:{port}"),
        master_name: name.to_owned(),
        master: format!("{master_ip}:{master_port}"),
        config_epoch: config_epoch.parse().ok()?,
    })
}

/// Reads `SENTINEL MASTER <name>`'s reply — field names and values, alternating — for its
/// `down-after-milliseconds`, in ms; `None` when it has none, or one that is not a number or
/// is above [`LARGEST_FAILOVER_MS`].
#[must_use]
pub fn sentinel_master<T: AsRef<[u8]>>(fields: &[T]) -> Option<u64> {
    fields
        .chunks_exact(2)
        .find_map(|pair| match pair {
            [name, value] if name.as_ref() == b"down-after-milliseconds" => {
                std::str::from_utf8(value.as_ref())
                    .ok()?
                    .parse::<u64>()
                    .ok()
            }
            _ => None,
        })
        .filter(|ms| *ms <= LARGEST_FAILOVER_MS)
}

/// A server as its `INFO server replication` describes it: who it is and whether it is a
/// master. Asked of the master the Sentinels name before this server follows it (so that a
/// server named by an address it does not know as its own — behind NAT, a mapped port — never
/// follows itself), and of a replica's quiet master (succession, and a replication cycle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `run_id`: the server process's random id.
    pub run_id: String,
    /// `role:master`.
    pub master: bool,
    /// A replica's master as `master_host:master_port`; `None` on a master.
    pub master_address: Option<String>,
}

/// Reads `INFO server replication` for a server's [`Identity`]; `None` without a `run_id` of 40
/// hex digits or a `role` of `master` or `slave` (a replica's `master_host` and `master_port`
/// give its master's address, when both are there).
#[must_use]
pub fn identity(info: &str) -> Option<Identity> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    let run_id =
        field("run_id").filter(|id| id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit()))?;
    let master = match field("role")? {
        "master" => true,
        "slave" => false,
        _ => return None,
    };
    let master_address = field("master_host")
        .zip(field("master_port").and_then(|port| port.parse::<u16>().ok()))
        .filter(|_| !master)
        .map(|(host, port)| format!("{host}:{port}"));
    Some(Identity {
        run_id: run_id.to_owned(),
        master,
        master_address,
    })
}

/// One Sentinel heard of.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watcher {
    /// Its `ip:port`.
    address: String,
    /// The name it monitors this group under.
    master_name: String,
    /// When its last hello came (unix ms).
    heard_ms: u64,
    /// Its `down-after-milliseconds`, once it answered.
    down_after_ms: Option<u64>,
    /// When to ask it (again), unix ms.
    ask_at_ms: u64,
}

/// What the module has learned of its deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    sentinels: Vec<Watcher>,
    /// This server's `cluster-node-timeout`, in Redis Cluster.
    node_timeout_ms: Option<u64>,
    /// The failover time kept from before the last restart.
    kept: Option<Failover>,
    /// The newest master configuration epoch any hello named, for this group.
    config_epoch: Option<u64>,
    /// The master the hello with the newest configuration epoch named (`ip:port`).
    named: Option<String>,
}

impl Deployment {
    /// A hello from a Sentinel arrived at `now_ms`. True when that Sentinel is new (one more
    /// than [`MAX_SENTINELS`] is ignored).
    pub fn heard(&mut self, now_ms: u64, hello: &Hello) -> bool {
        if self
            .config_epoch
            .is_none_or(|newest| hello.config_epoch >= newest)
        {
            self.config_epoch = Some(hello.config_epoch);
            self.named = Some(hello.master.clone());
        }
        if let Some(known) = self
            .sentinels
            .iter_mut()
            .find(|known| known.address == hello.sentinel)
        {
            known.heard_ms = now_ms;
            if known.master_name != hello.master_name {
                known.master_name.clone_from(&hello.master_name);
                known.down_after_ms = None;
                known.ask_at_ms = now_ms;
            }
            return false;
        }
        if self.sentinels.len() >= MAX_SENTINELS {
            return false;
        }
        self.sentinels.push(Watcher {
            address: hello.sentinel.clone(),
            master_name: hello.master_name.clone(),
            heard_ms: now_ms,
            down_after_ms: None,
            ask_at_ms: now_ms,
        });
        true
    }

    /// The Sentinels to ask now, as `(address, master name)`, each marked asked: it is asked
    /// again [`SENTINEL_RETRY_MS`] later unless it answers ([`Deployment::answered`]). Forgets
    /// the Sentinels not heard from for [`SENTINEL_FORGET_MS`].
    pub fn to_ask(&mut self, now_ms: u64) -> Vec<(String, String)> {
        self.sentinels
            .retain(|known| now_ms.saturating_sub(known.heard_ms) < SENTINEL_FORGET_MS);
        self.sentinels
            .iter_mut()
            .filter(|known| now_ms >= known.ask_at_ms)
            .map(|known| {
                known.ask_at_ms = now_ms.saturating_add(SENTINEL_RETRY_MS);
                (known.address.clone(), known.master_name.clone())
            })
            .collect()
    }

    /// The Sentinel at `address` answered at `now_ms` that it watches the group `master_name`
    /// with `down_after_ms`. True when that changed what it said before.
    pub fn answered(
        &mut self,
        now_ms: u64,
        address: &str,
        master_name: &str,
        down_after_ms: u64,
    ) -> bool {
        let Some(known) = self
            .sentinels
            .iter_mut()
            .find(|known| known.address == address && known.master_name == master_name)
        else {
            return false;
        };
        known.ask_at_ms = now_ms.saturating_add(SENTINEL_ASK_MS);
        let before = known.down_after_ms.replace(down_after_ms);
        before != Some(down_after_ms)
    }

    /// This server runs in Redis Cluster with `cluster-node-timeout` `node_timeout_ms`.
    pub const fn cluster(&mut self, node_timeout_ms: u64) {
        self.node_timeout_ms = Some(node_timeout_ms);
    }

    /// The failover time kept from before a restart: it stands in for Sentinels not asked yet,
    /// and for the default.
    pub fn keep(&mut self, failover: Failover) {
        let source = Source::Kept(failover.source.describe());
        self.kept = Some(Failover {
            ms: failover.ms.min(LARGEST_FAILOVER_MS),
            source,
        });
    }

    /// Whether the Sentinel at `address` is heard of (and not forgotten).
    #[must_use]
    pub fn knows(&self, address: &str) -> bool {
        self.sentinels.iter().any(|known| known.address == address)
    }

    /// True once a Sentinel has been heard of (and not forgotten).
    #[must_use]
    pub fn watched_by_sentinel(&self) -> bool {
        !self.sentinels.is_empty()
    }

    /// The newest master configuration epoch a hello named: it grows with every failover the
    /// Sentinels complete.
    #[must_use]
    pub const fn config_epoch(&self) -> Option<u64> {
        self.config_epoch
    }

    /// The master the Sentinels' newest word names (`ip:port`), with its configuration epoch.
    #[must_use]
    pub fn named_master(&self) -> Option<(&str, u64)> {
        Some((self.named.as_deref()?, self.config_epoch?))
    }

    /// The longest failover time among what is in force: each Sentinel that answered, the
    /// cluster's node timeout; while nothing was learned, the value kept from before a restart
    /// or else Sentinel's defaults. A Sentinel heard of but not asked yet counts as the others
    /// (the Sentinels of one group share their settings, and it is asked within a second): were
    /// it to stand for the default, every Sentinel that comes along would lengthen the leases
    /// given meanwhile, and with them what a replica lost then costs.
    #[must_use]
    pub fn failover(&self) -> Failover {
        let learned = self
            .sentinels
            .iter()
            .filter_map(|known| {
                let down_after_ms = known.down_after_ms?;
                Some(Failover {
                    ms: sentinel_failover_ms(down_after_ms),
                    source: Source::Sentinel {
                        address: known.address.clone(),
                        down_after_ms,
                    },
                })
            })
            .chain(self.node_timeout_ms.map(|node_timeout_ms| Failover {
                ms: cluster_failover_ms(node_timeout_ms),
                source: Source::Cluster { node_timeout_ms },
            }));
        learned
            .max_by_key(|failover| failover.ms)
            .or_else(|| self.kept.clone())
            .unwrap_or_else(Failover::default_sentinel)
    }
}

/// What a master makes of the Sentinels' word: whether they still name it master.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// The newest configuration epoch at which the Sentinels named this server master.
    named_epoch: Option<u64>,
    /// Promoted since, and not named yet: the Sentinels may not have caught up.
    promoted: bool,
}

impl Record {
    /// This server was just promoted: the Sentinels' word may name its old master until they
    /// have seen the promotion (their next `INFO`, within a second), so it is not followed.
    pub const fn promoted(&mut self) {
        self.promoted = true;
    }

    /// This server's own address changed (`replica-announce-port`, ...): the word that named
    /// it may not name it now, so the next one is checked as if none had (a word naming another
    /// address is then asked about before it is followed).
    pub const fn readdressed(&mut self) {
        self.named_epoch = None;
    }

    /// The master this master should follow: the one the Sentinels' newest word `named`
    /// (`ip:port` and epoch) names, when that is not this server (`me`), this server was not
    /// promoted since, and the word is newer than the last that named this server. `None`
    /// otherwise (and a word naming this server is noted).
    pub fn replaced_by(
        &mut self,
        named: Option<(&str, u64)>,
        me: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let (master, epoch) = named?;
        if me(master) {
            self.named_epoch = Some(epoch);
            self.promoted = false;
            return None;
        }
        let newer = self.named_epoch.is_none_or(|named| epoch > named);
        (newer && !self.promoted).then(|| master.to_owned())
    }
}

#[cfg(test)]
mod tests;
