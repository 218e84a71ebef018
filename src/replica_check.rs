//! A master's check of which replicas run the module ([`leasehold_core::insync::checks`]): it
//! asks them ([`crate::probes`]), logs what it finds, keeps those not known to run it out of
//! the in-sync set ([`crate::insync`]), and sends every lock again for one that missed lock
//! writes ([`crate::replay`]). `INFO lock` shows them ([`fields`]).

use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::insync::Replication;
use leasehold_core::insync::checks::{Checks, Found};
use redis_module::Context;

use crate::effects;
use crate::probes::{self, Answer, Question};
use crate::replay::{self, Progress};

static CHECKS: LazyLock<Mutex<Checks>> = LazyLock::new(Mutex::default);

fn checks() -> MutexGuard<'static, Checks> {
    CHECKS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A replica came online (`RedisModuleEvent_ReplicaChange`, which [`crate::promotion`]
/// receives): each must be asked again before it counts.
pub fn replica_online() {
    checks().replica_online();
}

/// What a master's look found.
pub struct Looked {
    /// `INFO replication` less the replicas not known to run the module, which may neither join
    /// the set nor count a write.
    pub replication: Replication,
    /// Replicas found without the module at this look: members leave the set at once.
    pub found_lacking: Vec<String>,
    /// Whether any replica online lacks the module: the master is part of a replication group.
    pub lacking: bool,
}

/// The master's look at `now_ms` (unix ms): takes in the `answers` that came, asks the replicas
/// due, sends locks again while a replay is under way, and filters `replication`.
pub fn look(ctx: &Context, now_ms: u64, replication: Replication, answers: &[Answer]) -> Looked {
    let writes = effects::writes();
    let mut checks = checks();
    let mut found_lacking = Vec::new();
    for answer in answers {
        if let Answer::Module { address, answer } = answer
            && let Some(found) = checks.answer(address, answer.clone(), writes)
        {
            tell(ctx, address, &found);
            match found {
                Found::Lacks => found_lacking.push(address.clone()),
                Found::Replay => replay::start(),
                Found::Unreachable(_) | Found::RunsNow => {}
            }
        }
    }
    let online = replication.replicas.iter().filter(|r| r.online);
    for id in checks.observe(now_ms, online.map(|replica| replica.id.as_str())) {
        if let Some((host, port)) = id.rsplit_once(':')
            && let Ok(port) = port.parse()
        {
            probes::ask(Question::Module {
                host: host.to_owned(),
                port,
            });
        }
    }
    if !effects::replication_paused() && replay::step(ctx) == Progress::Done {
        checks.replayed();
        ctx.log_notice("lock: every lock was sent again to the replicas");
    }
    let lacking = checks.lacking().next().is_some();
    Looked {
        replication: counting(&checks, replication),
        found_lacking,
        lacking,
    }
}

/// `replication` less the replicas not known to run the module, for `LOCK.INSYNC`.
pub fn counted(replication: Replication) -> Replication {
    counting(&checks(), replication)
}

fn counting(checks: &Checks, mut replication: Replication) -> Replication {
    replication
        .replicas
        .retain(|replica| checks.runs(&replica.id));
    replication
}

/// The replicas online found without the module, and those not known to run it yet (not asked,
/// not answering, or waiting for the locks they missed), each `ip:port`, sorted.
pub fn fields() -> (Vec<String>, Vec<String>) {
    let checks = checks();
    let sorted = |ids: &mut dyn Iterator<Item = &str>| {
        let mut ids: Vec<String> = ids.map(str::to_owned).collect();
        ids.sort();
        ids
    };
    (
        sorted(&mut checks.lacking()),
        sorted(&mut checks.unverified()),
    )
}

/// Logs what was found of replica `id`.
fn tell(ctx: &Context, id: &str, found: &Found) {
    match found {
        Found::Lacks => ctx.log_warning(&format!(
            "lock: replica {id} does not run the lock module: it is kept out of the in-sync set \
             (no grant counts as synced by it), and once this master holds a lock, a full sync \
             from it stops the replica (Redis cannot load the module's data). Load the module on \
             it (MODULE LOAD, and loadmodule in its configuration)"
        )),
        Found::Unreachable(error) => ctx.log_warning(&format!(
            "lock: could not ask replica {id} whether it runs the lock module ({error}): it is \
             kept out of the in-sync set until it answers at that address"
        )),
        Found::RunsNow => ctx.log_notice(&format!(
            "lock: replica {id} runs the lock module now: it may join the in-sync set"
        )),
        Found::Replay => ctx.log_notice(&format!(
            "lock: replica {id} runs the lock module now, and missed lock writes: every lock is \
             sent again before it may join the in-sync set"
        )),
    }
}
