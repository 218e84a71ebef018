//! Where the module runs, and how long a failover there takes to promote a replica: the rule
//! that the in-sync set's promotability lease must outlast ([`crate::insync`]), taken from the
//! deployment itself, never from a guess.
//!
//! - **Sentinel.** Every Sentinel that watches a server publishes a hello on the server's
//!   `__sentinel__:hello` channel every 2 s (`sentinelSendHello` in Redis's `sentinel.c`): its
//!   address, its run id and epoch, and the name, address and configuration epoch of the master
//!   it believes in ([`parse_hello`]). Any client allowed to `PUBLISH` there can send one, so a
//!   hello only says whom to ask: the module asks each Sentinel heard of — once the shell has
//!   matched it with a Sentinel's own connection to the server — for that master
//!   (`SENTINEL MASTER <name>`, [`sentinel_master`]), whose `down-after-milliseconds` is how
//!   long the master must be unreachable before a failover starts; Sentinel then takes about a
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
//! The Sentinels' answers also say which master they name, at which configuration epoch (it
//! grows with every failover they complete). A master that finds the newest of them naming
//! another server has been replaced ([`Record`]): an old master back with its own
//! configuration, or one cut off while the Sentinels failed over. It counts no write until it
//! is a replica — Sentinel turns it into one some seconds later (`+convert-to-slave`, after 8 s
//! of the master role) — since until then Sentinel could name it master again without the
//! writes the other master counted. It changes nothing in Redis itself.

/// Sentinel's own default `down-after-milliseconds` (`SENTINEL_DEFAULT_DOWN_AFTER` in Redis's
/// `sentinel.c`), in ms: what the module assumes until it has learned anything.
pub const SENTINEL_DEFAULT_DOWN_AFTER_MS: u64 = 30_000;

/// Sentinel's default `failover-timeout`, in ms.
pub const SENTINEL_DEFAULT_FAILOVER_TIMEOUT_MS: u64 = 180_000;

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

/// How often a Sentinel's `down-after-milliseconds` is asked again, in ms: as often as it says
/// hello (every 2 s, `sentinel.c`), so that a setting changed at runtime (`SENTINEL SET`) makes
/// the leases a master gives within two seconds and a heartbeat, long before a failover can use
/// it (which waits the new `down-after-milliseconds` from the master's death); a Sentinel that
/// did not answer is asked again after [`SENTINEL_RETRY_MS`].
pub const SENTINEL_ASK_MS: u64 = 2_000;

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
///
/// Any client allowed to `PUBLISH` on the channel can send one, so a hello is never believed:
/// it only says which Sentinel to ask, and when its word may have changed (crate `leasehold`'s
/// `deployment` matches its run id with a Sentinel's own connection to the server first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The port the Sentinel listens on.
    pub port: u16,
    /// The Sentinel's run id (40 hex digits): the first 8 name its links to the server
    /// (`sentinel-<8>-cmd`, `sentinel-<8>-pubsub`).
    pub runid: String,
    /// The name the Sentinel monitors this server's group under.
    pub master_name: String,
    /// The master the Sentinel says it believes in, `ip:port`.
    pub master: String,
    /// That master's configuration epoch: it grows with every failover Sentinel completes.
    pub config_epoch: u64,
}

impl Hello {
    /// The 8 hex digits of the run id that the Sentinel names its links to the server with.
    #[must_use]
    pub fn link_id(&self) -> &str {
        self.runid.get(..8).unwrap_or_default()
    }
}

/// The most bytes of a hello read: Sentinel formats it into a 1 024-byte buffer plus an
/// address.
pub const MAX_HELLO: usize = 1_100;

/// Reads a Sentinel's hello; `None` for anything else (wrong field count, bad numbers, a port
/// outside 1 to 65 535, a run id that is not 40 hex digits, a payload over [`MAX_HELLO`] bytes).
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
        runid,
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
    if ip.is_empty() || name.is_empty() || master_ip.is_empty() || !is_run_id(runid) {
        return None;
    }
    Some(Hello {
        port,
        runid: runid.to_owned(),
        master_name: name.to_owned(),
        master: format!("{master_ip}:{master_port}"),
        config_epoch: config_epoch.parse().ok()?,
    })
}

/// True for a run id as Redis and Sentinel make them: 40 hex digits.
#[must_use]
pub fn is_run_id(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// What a Sentinel says of the master it monitors this server's group as, in its reply to
/// `SENTINEL MASTER <name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// Its `down-after-milliseconds`.
    pub down_after_ms: u64,
    /// The master it names, `ip:port`, with its configuration epoch — `None` when the reply
    /// lacks either.
    pub master: Option<(String, u64)>,
    /// That master's run id as the Sentinel last read it from its `INFO` (40 hex digits), if it
    /// has read one: it names this server by its run id even where its address is one this
    /// server does not know as its own (NAT, a mapped port).
    pub runid: Option<String>,
    /// How long ago the Sentinel last had a valid `PING` reply from that master, in ms
    /// (`last-ok-ping-reply`; it pings every second).
    pub last_ok_ms: Option<u64>,
    /// How many Sentinels watch the group, as it counts them (`num-other-sentinels` + 1).
    pub sentinels: Option<usize>,
    /// Its `failover-timeout`, in ms: a failover that fails is tried again twice that long
    /// after it began (`sentinel.c`).
    pub failover_timeout_ms: Option<u64>,
}

/// Reads `SENTINEL MASTER <name>`'s reply — field names and values, alternating — for what the
/// Sentinel says ([`Said`]); `None` without a `down-after-milliseconds` that is a number of at
/// most [`LARGEST_FAILOVER_MS`].
#[must_use]
pub fn sentinel_master<T: AsRef<[u8]>>(fields: &[T]) -> Option<Said> {
    let field = |wanted: &str| {
        fields.chunks_exact(2).find_map(|pair| match pair {
            [name, value] if name.as_ref() == wanted.as_bytes() => {
                std::str::from_utf8(value.as_ref()).ok()
            }
            _ => None,
        })
    };
    let number = |wanted: &str| field(wanted)?.parse::<u64>().ok();
    let down_after_ms =
        number("down-after-milliseconds").filter(|ms| *ms <= LARGEST_FAILOVER_MS)?;
    let port = field("port")
        .and_then(|port| port.parse::<u16>().ok())
        .filter(|port| *port > 0);
    let master = field("ip")
        .filter(|ip| !ip.is_empty())
        .zip(port)
        .zip(number("config-epoch"))
        .map(|((ip, port), epoch)| (format!("{ip}:{port}"), epoch));
    Some(Said {
        down_after_ms,
        master,
        runid: field("runid").filter(|id| is_run_id(id)).map(str::to_owned),
        last_ok_ms: number("last-ok-ping-reply"),
        sentinels: number("num-other-sentinels")
            .and_then(|others| usize::try_from(others.saturating_add(1)).ok())
            .map(|count| count.min(MAX_SENTINELS)),
        failover_timeout_ms: number("failover-timeout").filter(|ms| *ms <= LARGEST_FAILOVER_MS),
    })
}

/// A server's role as its `ROLE` reply gives it: whether it is a master and, a replica, its
/// master's address. Asked of a replica's quiet master (succession, and a replication cycle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// `master`.
    pub master: bool,
    /// A replica's master as `ip:port`; `None` on a master.
    pub master_address: Option<String>,
}

/// Reads a `ROLE` reply, its elements as text (`["master", offset, ...]` or `["slave", ip,
/// port, state, offset]`); `None` for a Sentinel's, or anything else.
#[must_use]
pub fn role<T: AsRef<str>>(reply: &[T]) -> Option<Role> {
    match reply {
        [role, ..] if role.as_ref() == "master" => Some(Role {
            master: true,
            master_address: None,
        }),
        [role, ip, port, ..] if role.as_ref() == "slave" => {
            let port = port.as_ref().parse::<u16>().ok()?;
            Some(Role {
                master: false,
                master_address: Some(format!("{}:{port}", ip.as_ref())),
            })
        }
        _ => None,
    }
}

/// How soon a Sentinel whose hello says its word changed is asked again, at most, in ms: the
/// hellos are anyone's to send, and each costs the Sentinel one question.
pub const HINT_MS: u64 = 1_000;

/// One Sentinel heard of.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watcher {
    /// Its `ip:port`.
    address: String,
    /// The name it monitors this group under.
    master_name: String,
    /// When its last hello came (unix ms).
    heard_ms: u64,
    /// What it said, once it answered.
    said: Option<Said>,
    /// When to ask it (again), unix ms.
    ask_at_ms: u64,
    /// When it was last asked, unix ms.
    asked_ms: u64,
    /// When it last answered, unix ms.
    answered_ms: u64,
    /// When (unix ms, this server's clock) it last had a valid `PING` reply from the master it
    /// names, as its recent answers told: ascending, at most [`OK_TIMES`].
    ok_times: Vec<u64>,
}

/// How many of a Sentinel's last valid `PING` replies from the master are kept: about a minute
/// of answers.
const OK_TIMES: usize = 32;

impl Watcher {
    /// Its word on the master, as it answered: `(master, epoch)`.
    fn word(&self) -> Option<&(String, u64)> {
        self.said.as_ref()?.master.as_ref()
    }
}

/// The master the Sentinels name: the one the Sentinel with the newest configuration epoch
/// answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The group's name at that Sentinel.
    pub group: String,
    /// The master, `ip:port`.
    pub master: String,
    /// Its configuration epoch.
    pub epoch: u64,
    /// Its run id, if the Sentinel has read one.
    pub runid: Option<String>,
}

impl Named {
    /// Whether it names this server, known by `is_me` (an address of its own) or its run id
    /// `my_runid`. Another address with no run id read yet (after a failover Sentinel reads the
    /// new master's `INFO` up to 10 s later) is taken for another server: the cost of a mistake
    /// is a refusal, which the next answer ends ([`Deployment::hasten`]).
    #[must_use]
    pub fn names_me(&self, is_me: impl Fn(&str) -> bool, my_runid: &str) -> bool {
        is_me(&self.master) || self.runid.as_deref() == Some(my_runid)
    }
}

/// What the module has learned of its deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    sentinels: Vec<Watcher>,
    /// This server's `cluster-node-timeout`, in Redis Cluster.
    node_timeout_ms: Option<u64>,
    /// The failover time kept from before the last restart.
    kept: Option<Failover>,
}

impl Deployment {
    /// At `now_ms`, a hello from the Sentinel at `address` — the address the module asks it at,
    /// which the caller makes from what it verified. True when that Sentinel is new (one more
    /// than [`MAX_SENTINELS`] is ignored). A hello whose word differs from what the Sentinel
    /// answered last has it asked again, at most every [`HINT_MS`].
    pub fn heard(&mut self, now_ms: u64, address: &str, hello: &Hello) -> bool {
        if let Some(known) = self
            .sentinels
            .iter_mut()
            .find(|known| known.address == address)
        {
            known.heard_ms = now_ms;
            if known.master_name != hello.master_name {
                known.master_name.clone_from(&hello.master_name);
                known.said = None;
                known.ask_at_ms = now_ms;
            }
            let word = (hello.master.clone(), hello.config_epoch);
            if known.said.is_some() && known.word() != Some(&word) {
                let soonest = known.asked_ms.saturating_add(HINT_MS).max(now_ms);
                known.ask_at_ms = known.ask_at_ms.min(soonest);
            }
            return false;
        }
        if self.sentinels.len() >= MAX_SENTINELS {
            return false;
        }
        self.sentinels.push(Watcher {
            address: address.to_owned(),
            master_name: hello.master_name.clone(),
            heard_ms: now_ms,
            said: None,
            ask_at_ms: now_ms,
            asked_ms: 0,
            answered_ms: 0,
            ok_times: Vec::new(),
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
                known.asked_ms = now_ms;
                (known.address.clone(), known.master_name.clone())
            })
            .collect()
    }

    /// The Sentinel at `address` answered at `now_ms` what it says of the group `master_name`.
    /// True when its `down-after-milliseconds` changed.
    pub fn answered(&mut self, now_ms: u64, address: &str, master_name: &str, said: Said) -> bool {
        let Some(known) = self
            .sentinels
            .iter_mut()
            .find(|known| known.address == address && known.master_name == master_name)
        else {
            return false;
        };
        known.ask_at_ms = now_ms.saturating_add(SENTINEL_ASK_MS);
        known.answered_ms = now_ms;
        if known.word().map(|(master, _)| master) != said.master.as_ref().map(|(master, _)| master)
        {
            known.ok_times.clear();
        }
        if let Some(ago) = said.last_ok_ms {
            let ok = now_ms.saturating_sub(ago);
            if known.ok_times.last().is_none_or(|last| ok > *last) {
                known.ok_times.push(ok);
            }
            if known.ok_times.len() > OK_TIMES {
                known.ok_times.remove(0);
            }
        }
        let before = known.said.replace(said).map(|said| said.down_after_ms);
        before != known.said.as_ref().map(|said| said.down_after_ms)
    }

    /// How many Sentinels make a majority of the group's: more than half of the most that any
    /// answer counted, or of those heard of.
    #[must_use]
    pub fn majority(&self) -> usize {
        let counted = self
            .sentinels
            .iter()
            .filter_map(|known| known.said.as_ref()?.sentinels)
            .max()
            .unwrap_or(0);
        counted.max(self.sentinels.len()) / 2 + 1
    }

    /// Whether a majority of the Sentinels ([`Deployment::majority`]), each naming a master
    /// `names` takes for this server, had a valid `PING` reply from it at some time in
    /// `from_ms..=to_ms` (unix ms, this server's clock): it was alive and answering then.
    #[must_use]
    pub fn master_answered_between(
        &self,
        names: impl Fn(&Said) -> bool,
        from_ms: u64,
        to_ms: u64,
    ) -> bool {
        let answered = self
            .sentinels
            .iter()
            .filter(|known| known.said.as_ref().is_some_and(&names))
            .filter(|known| {
                known
                    .ok_times
                    .iter()
                    .any(|ok| (from_ms..=to_ms).contains(ok))
            })
            .count();
        answered >= self.majority()
    }

    /// Since when (unix ms, this server's clock) a majority of the Sentinels, each naming
    /// `master` (`ip:port`) in an answer given at `fresh_from_ms` or later, have had no valid
    /// `PING` reply from it: the latest of their last valid replies among the earliest majority.
    /// `None` without such a majority.
    #[must_use]
    pub fn master_silent_since(&self, master: &str, fresh_from_ms: u64) -> Option<u64> {
        let mut last_ok: Vec<u64> = self
            .sentinels
            .iter()
            .filter(|known| known.answered_ms >= fresh_from_ms)
            .filter(|known| known.word().is_some_and(|(named, _)| named == master))
            .filter_map(|known| known.ok_times.last().copied())
            .collect();
        last_ok.sort_unstable();
        last_ok.get(self.majority().checked_sub(1)?).copied()
    }

    /// The longest `failover-timeout` the Sentinels answered, in ms; Sentinel's default
    /// (180 000) before any did.
    #[must_use]
    pub fn failover_timeout_ms(&self) -> u64 {
        self.sentinels
            .iter()
            .filter_map(|known| known.said.as_ref()?.failover_timeout_ms)
            .max()
            .unwrap_or(SENTINEL_DEFAULT_FAILOVER_TIMEOUT_MS)
    }

    /// Has every Sentinel asked again within [`HINT_MS`] of its last question: while their word
    /// names another master, so that a word that changes (the run id read, a failover back) is
    /// followed within seconds.
    pub fn hasten(&mut self) {
        for known in &mut self.sentinels {
            let soonest = known.asked_ms.saturating_add(HINT_MS);
            known.ask_at_ms = known.ask_at_ms.min(soonest);
        }
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

    /// How many Sentinels are heard of (and not forgotten).
    #[must_use]
    pub fn sentinels(&self) -> usize {
        self.sentinels.len()
    }

    /// The newest master configuration epoch the Sentinels answered: it grows with every
    /// failover they complete. Only the Sentinels heard of now count, each with its last
    /// answer, so a group monitored anew (`SENTINEL REMOVE`, `MONITOR`: epochs from 0 again)
    /// is followed once the old answers are replaced.
    #[must_use]
    pub fn config_epoch(&self) -> Option<u64> {
        self.sentinels
            .iter()
            .filter_map(|known| Some(known.word()?.1))
            .max()
    }

    /// The master the Sentinels name: the word of the Sentinel that answered the newest
    /// configuration epoch.
    #[must_use]
    pub fn named_master(&self) -> Option<Named> {
        let (known, (master, epoch)) = self
            .sentinels
            .iter()
            .filter_map(|known| Some((known, known.word()?)))
            .max_by_key(|(_, (_, epoch))| *epoch)?;
        Some(Named {
            group: known.master_name.clone(),
            master: master.clone(),
            epoch: *epoch,
            runid: known.said.as_ref()?.runid.clone(),
        })
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
                let down_after_ms = known.said.as_ref()?.down_after_ms;
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The group and the newest configuration epoch at which the Sentinels named this server
    /// master.
    named: Option<(String, u64)>,
    /// Promoted since, and not named yet: the Sentinels may not have caught up.
    promoted: bool,
}

impl Record {
    /// This server was just promoted: the Sentinels' word may name its old master until they
    /// have seen the promotion (their next `INFO`, within a second), so it does not count.
    pub const fn promoted(&mut self) {
        self.promoted = true;
    }

    /// This server's own address changed (`replica-announce-port`, ...): the word that named
    /// it may not name it now, so the next one is checked as if none had.
    pub fn readdressed(&mut self) {
        self.named = None;
    }

    /// The master that replaced this one: the one the Sentinels' word `named` names, when
    /// `names_me` says it is another server ([`Named::names_me`]), this server was not promoted
    /// since, and the word is newer than the last that named this server in the same group (a
    /// group monitored anew starts its epochs again). `None` otherwise, and a word naming this
    /// server is noted.
    pub fn replaced_by(&mut self, named: Option<&Named>, names_me: bool) -> Option<String> {
        let named = named?;
        if names_me {
            self.named = Some((named.group.clone(), named.epoch));
            self.promoted = false;
            return None;
        }
        let newer = match &self.named {
            Some((group, epoch)) if *group == named.group => named.epoch > *epoch,
            _ => true,
        };
        (newer && !self.promoted).then(|| named.master.clone())
    }
}

#[cfg(test)]
mod tests;
