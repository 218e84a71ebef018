//! What the module learns of the deployment it runs in (the rules:
//! [`leasehold_core::deployment`]): the Sentinels' hellos, which the command filter sees
//! ([`crate::promotion`]); each Sentinel's `down-after-milliseconds`, asked on the probes'
//! thread ([`crate::probes`]); and in Redis Cluster this server's `cluster-node-timeout`, read
//! on every look. The failover time that results sets the in-sync set's lease
//! ([`crate::insync`]). It is logged when it changes, with where it came from, shown by
//! `INFO lock`, and kept across restarts ([`crate::state_file`]).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::deployment::{self, Deployment, Failover};
use redis_module::{Context, ContextFlags};

use crate::clock;
use crate::probes::{self, Answer, Credentials, Question};
use crate::server_config;

/// What was learned, and what the log said last.
#[derive(Default)]
struct Learned {
    deployment: Deployment,
    /// The failover time logged last.
    logged: Option<Failover>,
    /// The last error each Sentinel's question met, logged once.
    errors: HashMap<String, String>,
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
/// server, if the payload is a hello.
pub fn heard_hello(payload: &[u8]) {
    if let Some(hello) = deployment::parse_hello(payload) {
        learned().deployment.heard(clock::now_ms(), &hello);
    }
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
    for answer in answers {
        if let Answer::DownAfter {
            address,
            master_name,
            ms,
        } = answer
        {
            take(ctx, &mut learned, now_ms, address, master_name, ms);
        }
    }
    let due = learned.deployment.to_ask(now_ms);
    let Learned {
        deployment, errors, ..
    } = &mut *learned;
    errors.retain(|address, _| deployment.knows(address));
    if !due.is_empty() {
        let credentials = credentials(ctx);
        for (address, master_name) in due {
            probes::ask(Question::DownAfter {
                address,
                master_name,
                credentials: credentials.clone(),
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

/// One Sentinel's answer: its value, or an error logged once.
fn take(
    ctx: &Context,
    learned: &mut Learned,
    now_ms: u64,
    address: &str,
    master_name: &str,
    ms: &Result<u64, String>,
) {
    match ms {
        Ok(ms) => {
            learned.errors.remove(address);
            if learned
                .deployment
                .answered(now_ms, address, master_name, *ms)
            {
                ctx.log_notice(&format!(
                    "lock: the Sentinel at {address} watches {master_name} with \
                     down-after-milliseconds {ms}"
                ));
            }
        }
        Err(error) => {
            if learned.errors.get(address) != Some(error) {
                ctx.log_warning(&format!(
                    "lock: cannot ask the Sentinel at {address} for its down-after-milliseconds \
                     ({error}); until it answers, the in-sync lease assumes the longest time \
                     known or Sentinel's default (set lock.insync-timeout-ms to decide)"
                ));
                learned.errors.insert(address.to_owned(), error.clone());
            }
        }
    }
}

/// `masteruser` and `masterauth`, to authenticate with where asked.
pub fn credentials(ctx: &Context) -> Credentials {
    let set = |name: &str| server_config::get(ctx, name).filter(|value| !value.is_empty());
    Credentials {
        username: set("masteruser"),
        password: set("masterauth"),
    }
}

/// The failover time in force.
pub fn failover() -> Failover {
    learned().deployment.failover()
}

/// The Sentinels' newest master configuration epoch heard, if any Sentinel was heard.
pub fn config_epoch() -> Option<u64> {
    learned().deployment.config_epoch()
}

/// The master the Sentinels' newest word names (`ip:port`), with its configuration epoch.
pub fn named_master() -> Option<(String, u64)> {
    learned()
        .deployment
        .named_master()
        .map(|(master, epoch)| (master.to_owned(), epoch))
}

/// True while a Sentinel is heard from.
pub fn watched_by_sentinel() -> bool {
    learned().deployment.watched_by_sentinel()
}
