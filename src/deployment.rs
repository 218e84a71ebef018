//! What the module learns of the deployment it runs in (the rules:
//! [`leasehold_core::deployment`]): the Sentinels' hellos, which the command filter sees
//! ([`crate::filter`]); what each Sentinel says of the group (`SENTINEL MASTER`: its
//! `down-after-milliseconds`, the master it names), asked on the probes' thread
//! ([`crate::probes`]); and in Redis Cluster this server's `cluster-node-timeout`, read on every
//! look. The failover time that results sets the in-sync set's lease ([`crate::insync`]). It is
//! logged when it changes, with where it came from, shown by `INFO lock`, and kept across
//! restarts ([`crate::state_file`]).
//!
//! **Which Sentinels are believed.** A hello or a connection's name is anyone's to send, so
//! neither is believed on its own. A Sentinel is *verified* when it has a command link to this
//! server — a connection named `sentinel-<8 hex digits>-cmd`, as every Sentinel names its own
//! (`CLIENT LIST`) — whose ACL user may run `SLAVEOF` (`ACL DRYRUN`): what Sentinel runs to fail
//! over, and what lets a client make the server replicate from any address, so a client that
//! could forge such a link gains nothing through the module. A hello counts only when its run
//! id begins with a verified link's 8 digits, and the Sentinel is asked at the address that
//! link comes from (the kernel's word, never the hello's) and the port the hello names,
//! without credentials. Its answers, never the hellos, say which master the Sentinels name.
//! Links are looked for when a hello or a connection name says a Sentinel may be there (at
//! most every [`SCAN_HINT_MS`]) and every [`SCAN_PERIOD_MS`] while any is known.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::deployment::{self, Deployment, Failover, Named, Said};
use redis_module::{Context, ContextFlags};

use crate::clock;
use crate::probes::{self, Answer, Credentials, Peer, Question, Tls};
use crate::server_config;

/// How soon after the last look a hint (a hello or a connection named by no verified link) has
/// the Sentinels' links looked for again, at most, in ms.
pub const SCAN_HINT_MS: u64 = 1_000;

/// How often the verified links are looked for while any is known, in ms: a link that closed
/// is forgotten by then.
pub const SCAN_PERIOD_MS: u64 = 10_000;

/// The most user names whose refusal the log keeps saying once.
const MAX_LOGGED_USERS: usize = 64;

/// What was learned, and what the log said last.
#[derive(Default)]
struct Learned {
    deployment: Deployment,
    /// The failover time logged last.
    logged: Option<Failover>,
    /// The last error each Sentinel's question met, logged once.
    errors: HashMap<String, String>,
    /// The verified Sentinels' command links: the 8 digits of their name, and the address each
    /// comes from.
    links: HashMap<String, String>,
    /// Whether a hint came since the last look for links.
    hinted: bool,
    /// When the links were last looked for (unix ms).
    scanned_ms: u64,
    /// The users whose connections named like a Sentinel's were not believed (logged once).
    refused_users: Vec<String>,
}

impl Learned {
    /// Whether to look for the Sentinels' links at `now_ms`.
    fn scan_due(&self, now_ms: u64) -> bool {
        let since = now_ms.saturating_sub(self.scanned_ms);
        (self.hinted && since >= SCAN_HINT_MS)
            || (!self.links.is_empty() && since >= SCAN_PERIOD_MS)
    }
}

static LEARNED: LazyLock<Mutex<Learned>> = LazyLock::new(Mutex::default);

fn learned() -> MutexGuard<'static, Learned> {
    LEARNED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// At start: the failover time kept from before the restart, if any.
pub fn start(kept: Option<Failover>) {
    if let Some(kept) = kept {
        learned().deployment.keep(kept);
    }
}

/// The command filter saw `PUBLISH __sentinel__:hello payload`: a Sentinel that watches this
/// server, if the payload is a hello whose run id a verified link begins with; otherwise a hint
/// to look for links.
pub fn heard_hello(payload: &[u8]) {
    let Some(hello) = deployment::parse_hello(payload) else {
        return;
    };
    let mut learned = learned();
    match learned.links.get(hello.link_id()) {
        Some(ip) => {
            let address = format!("{ip}:{}", hello.port);
            learned.deployment.heard(clock::now_ms(), &address, &hello);
        }
        None => learned.hinted = true,
    }
}

/// The command filter saw a connection named `sentinel-...`: a hint to look for links.
pub fn sentinel_named() {
    learned().hinted = true;
}

/// Every look: takes the Sentinels' answers among `answers`, asks those due, reads the
/// cluster's node timeout, and logs the failover time when it changed. Returns it, and whether
/// it changed since the last look (to be kept).
pub fn look(ctx: &Context, now_ms: u64, answers: &[Answer]) -> (Failover, bool) {
    let node_timeout = ctx
        .get_flags()
        .contains(ContextFlags::CLUSTER)
        .then(|| server_config::integer(ctx, "cluster-node-timeout"))
        .flatten()
        .and_then(|ms| u64::try_from(ms).ok());
    let mut learned = learned();
    if let Some(ms) = node_timeout {
        learned.deployment.cluster(ms);
    }
    if learned.scan_due(now_ms) {
        scan(ctx, &mut learned, now_ms);
    }
    for answer in answers {
        if let Answer::Sentinel {
            address,
            master_name,
            said,
        } = answer
        {
            take(ctx, &mut learned, now_ms, address, master_name, said);
        }
    }
    let due = learned.deployment.to_ask(now_ms);
    let Learned {
        deployment, errors, ..
    } = &mut *learned;
    errors.retain(|address, _| deployment.knows(address));
    for (address, master_name) in due {
        if let Some(peer) = peer(ctx, &address, false) {
            probes::ask(Question::Sentinel {
                peer,
                address,
                master_name,
            });
        }
    }
    let failover = learned.deployment.failover();
    let changed = learned.logged.as_ref() != Some(&failover);
    if changed {
        ctx.log_notice(&format!(
            "lock: failovers here take up to {} ms ({}): in-sync leases of {} ms",
            failover.ms,
            failover.source.describe(),
            leasehold_core::insync::lease_ms(failover.ms)
        ));
        learned.logged = Some(failover.clone());
    }
    (failover, changed)
}

/// Looks for the verified Sentinels' links ([the module's doc](self)) at `now_ms`.
fn scan(ctx: &Context, learned: &mut Learned, now_ms: u64) {
    learned.hinted = false;
    learned.scanned_ms = now_ms;
    let list = ctx
        .call("CLIENT", &["LIST", "TYPE", "normal"])
        .ok()
        .and_then(server_config::text)
        .unwrap_or_default();
    let mut rights: HashMap<&str, bool> = HashMap::new();
    let mut links = HashMap::new();
    for line in list.lines() {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
        };
        let Some(id) = field("name").and_then(link_id) else {
            continue;
        };
        let user = field("user").unwrap_or("default");
        let may = *rights
            .entry(user)
            .or_insert_with(|| may_replicate(ctx, user));
        if !may {
            refused(ctx, learned, user);
            continue;
        }
        let peer = field("addr").and_then(|addr| Some(addr.rsplit_once(':')?.0));
        if let Some(ip) = peer {
            links.insert(id.to_owned(), ip.to_owned());
        }
    }
    learned.links = links;
}

/// The 8 hex digits of a Sentinel's command link's name, `sentinel-<8>-cmd`.
fn link_id(name: &str) -> Option<&str> {
    let id = name.strip_prefix("sentinel-")?.strip_suffix("-cmd")?;
    (id.len() == 8 && id.bytes().all(|byte| byte.is_ascii_hexdigit())).then_some(id)
}

/// Whether `user` may run `SLAVEOF NO ONE` (`ACL DRYRUN` answers `OK`; otherwise it says why
/// not).
fn may_replicate(ctx: &Context, user: &str) -> bool {
    ctx.call("ACL", &["DRYRUN", user, "SLAVEOF", "NO", "ONE"])
        .ok()
        .and_then(server_config::text)
        .as_deref()
        == Some("OK")
}

/// Logs once that a connection of `user`, named like a Sentinel's, is not believed.
fn refused(ctx: &Context, learned: &mut Learned, user: &str) {
    if learned.refused_users.len() >= MAX_LOGGED_USERS
        || learned.refused_users.iter().any(|known| known == user)
    {
        return;
    }
    learned.refused_users.push(user.to_owned());
    ctx.log_warning(&format!(
        "lock: a connection named like a Sentinel's (sentinel-...-cmd) is not taken for one: its \
         user {user} may not run SLAVEOF, which Sentinel runs to fail over (the module believes \
         no Sentinel with less)"
    ));
}

/// One Sentinel's answer: what it says, or an error logged once.
fn take(
    ctx: &Context,
    learned: &mut Learned,
    now_ms: u64,
    address: &str,
    master_name: &str,
    said: &Result<Said, String>,
) {
    match said {
        Ok(said) => {
            learned.errors.remove(address);
            let ms = said.down_after_ms;
            if learned
                .deployment
                .answered(now_ms, address, master_name, said.clone())
            {
                ctx.log_notice(&format!(
                    "lock: the Sentinel at {address} watches {master_name} with \
                     down-after-milliseconds {ms}"
                ));
            }
        }
        Err(error) => {
            if learned.errors.get(address) != Some(error) {
                let password = if error.starts_with("NOAUTH") {
                    " — it asks for a password, and the module sends the server's credentials \
                     to its own master only"
                } else {
                    ""
                };
                ctx.log_warning(&format!(
                    "lock: cannot ask the Sentinel at {address} what it says of {master_name} \
                     ({error}{password}); until it answers, the in-sync lease assumes the \
                     longest time known or Sentinel's default (set lock.insync-timeout-ms to \
                     decide), and its word on the master is not known"
                ));
                learned.errors.insert(address.to_owned(), error.clone());
            }
        }
    }
}

/// How to reach `address` (`host:port`, an IPv6 host bracketed or not) the way this server's
/// replication does: TLS with the server's own certificates when `tls-replication` is on
/// ([`probes::Tls`]), and `masteruser` and `masterauth` only for this replica's own master
/// (`own_master`). `None` when `address` is not `host:port`.
pub fn peer(ctx: &Context, address: &str, own_master: bool) -> Option<Peer> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().ok()?;
    let set = |name: &str| server_config::get(ctx, name).filter(|value| !value.is_empty());
    let credentials = if own_master {
        Credentials {
            username: set("masteruser"),
            password: set("masterauth"),
        }
    } else {
        Credentials::default()
    };
    let tls = (set("tls-replication").as_deref() == Some("yes")).then(|| Tls {
        cert_file: set("tls-client-cert-file")
            .or_else(|| set("tls-cert-file"))
            .unwrap_or_default(),
        key_file: set("tls-client-key-file")
            .or_else(|| set("tls-key-file"))
            .unwrap_or_default(),
        ca_file: set("tls-ca-cert-file"),
        ca_dir: set("tls-ca-cert-dir"),
    });
    Some(Peer {
        host: host.to_owned(),
        port,
        credentials,
        tls,
    })
}

/// The failover time in force.
pub fn failover() -> Failover {
    learned().deployment.failover()
}

/// The Sentinels' newest master configuration epoch answered, if any Sentinel answered.
pub fn config_epoch() -> Option<u64> {
    learned().deployment.config_epoch()
}

/// The master the verified Sentinels' newest word names.
pub fn named_master() -> Option<Named> {
    learned().deployment.named_master()
}

/// Has the Sentinels asked again soon ([`Deployment::hasten`]): their word names another
/// master.
pub fn hasten() {
    learned().deployment.hasten();
}

/// True while a verified Sentinel has a command link to this server: it belongs to a
/// replication group.
pub fn sentinel_connected() -> bool {
    !learned().links.is_empty()
}

/// How many Sentinels are verified and heard from.
pub fn sentinels() -> usize {
    learned().deployment.sentinels()
}

/// Whether a majority of the Sentinels, each naming a master `names_me` takes for this server,
/// had a valid `PING` reply from it at some time from `from_ms` to `to_ms` (unix ms)
/// ([`Deployment::master_answered_between`]).
pub fn master_answered_between(names_me: impl Fn(&Said) -> bool, from_ms: u64, to_ms: u64) -> bool {
    learned()
        .deployment
        .master_answered_between(names_me, from_ms, to_ms)
}

/// Since when (unix ms) a majority of the Sentinels, each naming `master` (`ip:port`) in an
/// answer given since `fresh_from_ms`, have had no valid `PING` reply from it
/// ([`Deployment::master_silent_since`]).
pub fn master_silent_since(master: &str, fresh_from_ms: u64) -> Option<u64> {
    learned()
        .deployment
        .master_silent_since(master, fresh_from_ms)
}

/// How long after its lease ends a member may be promoted on the Sentinels' word that its
/// master went silent before ([`leasehold_core::insync::Promotability::MasterDown`]), for a lease of
/// `lease_ms`: twice the Sentinels' `failover-timeout` — when a failover that failed is tried
/// again (`sentinel.c`) — and a lease, since the first try may begin up to a lease after the
/// master's death.
pub fn master_down_ms(lease_ms: u64) -> u64 {
    learned()
        .deployment
        .failover_timeout_ms()
        .saturating_mul(2)
        .saturating_add(lease_ms)
}
