//! A master's check of which replicas run the module ([`leasehold_core::insync::checks`]): the
//! challenge it sends in its heartbeat, `LOCK.REPLCONF` by which each replica answers it, the
//! log of replicas that stay silent, and the locks sent again to one that missed lock writes
//! ([`crate::replay`]). Each replica it looks at is marked with what is known of its module, for
//! the in-sync set ([`crate::insync`]). `INFO lock` shows them ([`fields`]).

use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::args;
use leasehold_core::insync::Replication;
use leasehold_core::insync::checks::{Checks, Found, HOLD_FACTOR};
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::api;
use crate::clock;
use crate::deployment;
use crate::effects;
use crate::replay::{self, Progress};
use crate::replies;

/// The checks and the challenge they prove.
struct State {
    checks: Checks,
    /// 32 hex digits drawn at random: at start, and whenever a replica comes online.
    challenge: String,
    /// While writes are paused: the heartbeat the master could not send, and its replication
    /// offset then ([`paused_heartbeat`]).
    paused: Option<(String, u64)>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| {
    Mutex::new(State {
        checks: Checks::default(),
        challenge: draw(),
        paused: None,
    })
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new challenge: 16 bytes from the operating system's generator, in hex. Without one (no
/// `getrandom`), a challenge from the time and the process, which a client cannot read either:
/// it travels only in the replication stream.
fn draw() -> String {
    let mut bytes = [0_u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let seed = u128::from(clock::now_ms()) << 32 | u128::from(std::process::id());
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The challenge the heartbeat carries now.
pub fn challenge() -> String {
    state().challenge.clone()
}

/// While writes are paused (`CLIENT PAUSE WRITE`, `FAILOVER`: the master sends its replicas
/// nothing, so that their offsets can reach its own), the heartbeat it would have sent and its
/// replication offset then; `None` once they are not. `LOCK.REPLCONF` answers it to a replica
/// that asks ([`replconf`]), so that a pause longer than the lease takes no member's lease away
/// — the master counts no write meanwhile — and a master that dies late in one is replaced as
/// without the module.
pub fn paused_heartbeat(heartbeat: Option<(String, u64)>) {
    state().paused = heartbeat;
}

/// A replica came online (`RedisModuleEvent_ReplicaChange`, which does not say which): a new
/// challenge, which every replica must answer again before its acknowledgements count.
pub fn replica_online() {
    let mut state = state();
    state.challenge = draw();
    state
        .checks
        .replica_online(clock::now_ms(), effects::writes());
}

/// What a master's look found.
pub struct Looked {
    /// `INFO replication`, each replica marked with what is known of its module.
    pub replication: Replication,
    /// Replicas found silent at this look: members leave the set at once.
    pub silent: Vec<String>,
}

/// The master's look at `now_ms` (unix ms): notes which replicas are online, logs those found
/// silent, sends locks again while a replay is under way, and marks `replication`.
pub fn look(ctx: &Context, now_ms: u64, replication: Replication) -> Looked {
    let mut state = state();
    let online = replication.replicas.iter().filter(|r| r.online);
    let silent = state.checks.observe(
        now_ms,
        effects::writes(),
        online.map(|replica| replica.id.as_str()),
    );
    for id in &silent {
        tell(ctx, id, &Found::Silent);
    }
    if !effects::replication_paused() && replay::step(ctx) == Progress::Done {
        state.checks.replayed();
        ctx.log_notice("lock: every lock was sent again to the replicas");
    }
    Looked {
        replication: marking(&state.checks, now_ms, replication),
        silent,
    }
}

/// `replication` with each replica marked with what is known of its module, for
/// `LOCK.INSYNC` and the synced writes.
pub fn marked(replication: Replication) -> Replication {
    marking(&state().checks, clock::now_ms(), replication)
}

fn marking(checks: &Checks, now_ms: u64, mut replication: Replication) -> Replication {
    for replica in &mut replication.replicas {
        replica.module = checks.module(&replica.id, now_ms);
    }
    replication.held_back = checks.held_back(now_ms, hold_ms());
    replication
}

/// How long a replica silent about the module is held back once offline, in ms: [`HOLD_FACTOR`]
/// times the deployment's failover time.
fn hold_ms() -> u64 {
    deployment::failover().ms.saturating_mul(HOLD_FACTOR)
}

/// The `INFO lock` lists of a master's replicas, each `ip:port`, sorted: those silent about the
/// module (they do not run it, as far as the master can tell: online, or offline but held back
/// since they may still be promoted), and those online not known to run it yet (it came online
/// or the challenge changed under [the grace][GRACE], or it waits for the locks it missed).
///
/// [GRACE]: leasehold_core::insync::checks::GRACE_MS
pub fn fields() -> (Vec<String>, Vec<String>) {
    let state = state();
    let now = clock::now_ms();
    let (mut silent, mut unproven): (Vec<_>, Vec<_>) = state
        .checks
        .unproven(now)
        .into_iter()
        .partition(|(_, silent)| *silent);
    let held_back = state.checks.held_back(now, hold_ms());
    silent.extend(held_back.into_iter().map(|id| (id, true)));
    unproven.extend(state.checks.replaying().into_iter().map(|id| (id, false)));
    let ids = |list: Vec<(String, bool)>| {
        let mut ids: Vec<String> = list.into_iter().map(|(id, _)| id).collect();
        ids.sort();
        ids
    };
    (ids(silent), ids(unproven))
}

/// `LOCK.REPLCONF challenge <word> listening-port <port> [ip-address <ip>]`: a replica says it
/// runs the module. The replica is the one `INFO replication` names `ip:port`: `ip` as given,
/// or the address this connection comes from (as Redis names a replica that announces none).
/// Replies `OK`; while writes are paused, the heartbeat the master could not send and its
/// replication offset then (`[heartbeat, offset]`, [`paused_heartbeat`]), which the replica
/// takes once it has applied that offset.
///
/// # Errors
/// Arity and argument errors; `ERR` on a replica, and for a challenge that is not the current
/// one.
pub fn replconf(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let said = args::replconf(&args).map_err(replies::arg_error)?;
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        return Err(RedisError::Str(
            "ERR LOCK.REPLCONF is for a master; this server is a replica",
        ));
    }
    let ip = match said.ip {
        Some(ip) => ip.to_owned(),
        None => peer_address(ctx)?,
    };
    let id = format!("{ip}:{}", said.port);
    let (found, paused) = {
        let mut state = state();
        if said.challenge != state.challenge.as_bytes() {
            return Err(RedisError::Str(
                "ERR LOCK.REPLCONF challenge is not this master's current one (a replica hears \
                 it in the replication stream)",
            ));
        }
        let found = state.checks.said(&id, clock::now_ms(), effects::writes());
        let paused = state
            .paused
            .clone()
            .filter(|_| effects::replication_paused());
        (found, paused)
    };
    if let Some(found) = found {
        tell(ctx, &id, &found);
        if found == Found::Replay {
            replay::start();
        }
    }
    Ok(paused.map_or(
        RedisValue::SimpleStringStatic("OK"),
        |(heartbeat, offset)| {
            RedisValue::Array(vec![
                RedisValue::BulkString(heartbeat),
                RedisValue::Integer(i64::try_from(offset).unwrap_or(i64::MAX)),
            ])
        },
    ))
}

/// The IP address the calling client connects from.
fn peer_address(ctx: &Context) -> Result<String, RedisError> {
    let id = unsafe { raw::RedisModule_GetClientId }.map(|id_of| unsafe { id_of(ctx.get_raw()) });
    let bytes: Vec<u8> = id
        .and_then(api::client_info)
        .map(|info| {
            info.addr
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| c.to_ne_bytes()[0])
                .collect()
        })
        .unwrap_or_default();
    String::from_utf8(bytes)
        .ok()
        .filter(|ip| !ip.is_empty())
        .ok_or(RedisError::Str(
            "ERR LOCK.REPLCONF cannot tell this connection's address",
        ))
}

/// Logs what was found of replica `id`.
fn tell(ctx: &Context, id: &str, found: &Found) {
    match found {
        Found::Silent => ctx.log_warning(&format!(
            "lock: replica {id} has not said it runs the lock module: no lock write counts \
             (synced grants get NOREPLICAS) while it is attached, since Sentinel or Cluster could \
             promote it without them. Load the module on it (MODULE LOAD, and loadmodule in its \
             configuration); if it does run it, its connection to this master fails: see its \
             log and INFO lock (lock_insync_said)"
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
