//! A replica's word to its master that the module runs here (`LOCK.REPLCONF`, the master's half
//! is [`crate::replica_check`]; the rules are [`leasehold_core::insync::checks`]).
//!
//! The replica says it over a connection of its own to the master it replicates from, made the
//! way its replication is ([`crate::deployment::peer`]: TLS, `masteruser`/`masterauth`), with
//! the challenge the master's last heartbeat carried: as soon as it hears a new one ([`heard`]),
//! and once per master before any (so that it learns whether the master runs the module at
//! all). The same question is asked again at most every [`ASK_PERIOD_MS`]. `INFO lock` shows
//! how the last one went ([`said`]).

use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::insync::checks::Replied;
use redis_module::Context;

use crate::clock;
use crate::deployment;
use crate::probes::{self, Answer, Question};
use crate::server_config;

/// How often a replica asks its master at most, in ms.
pub const ASK_PERIOD_MS: u64 = 1_000;

#[derive(Debug, Default)]
struct Hello {
    /// The master (`host:port`) the rest is about.
    master: Option<String>,
    /// The challenge the master accepted last.
    said: Option<String>,
    /// Whether the master answered anything yet.
    answered: bool,
    /// When this replica asked last (unix ms), and with which challenge.
    asked: (u64, Option<String>),
    /// How the last question went, for `INFO lock`.
    status: String,
}

static HELLO: LazyLock<Mutex<Hello>> = LazyLock::new(Mutex::default);

fn hello() -> MutexGuard<'static, Hello> {
    HELLO.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a replica's master answered, at a look.
#[derive(Debug, Default)]
pub struct Heard {
    /// The master does not run the module.
    pub without_module: bool,
    /// The master's writes are paused: the heartbeat it could not send, and its replication
    /// offset then ([`crate::replica_check::paused_heartbeat`]).
    pub paused: Option<(String, u64)>,
}

/// A replica's look at `now_ms`: takes in its master's answers, and tells the master
/// (`host:port`, `None` while it has none) that the module runs here when the heartbeat's
/// `challenge` was not said yet, when the master was never asked, or — every
/// [`ASK_PERIOD_MS`] — while the master is `quiet` (no heartbeat for two: it may be paused, and
/// then answers with the heartbeat it could not send).
pub fn look(
    ctx: &Context,
    now_ms: u64,
    (master, challenge): (Option<&str>, Option<&str>),
    quiet: bool,
    answers: &[Answer],
) -> Heard {
    let mut hello = hello();
    if hello.master.as_deref() != master {
        *hello = Hello {
            master: master.map(str::to_owned),
            ..Hello::default()
        };
    }
    let mut heard = Heard::default();
    for answer in answers {
        if let Answer::Replconf {
            address,
            challenge: told,
            reply,
            paused,
        } = answer
            && Some(address.as_str()) == master
        {
            heard.without_module |= take(ctx, &mut hello, told, reply);
            heard.paused = paused.clone().or(heard.paused);
        }
    }
    let due = match challenge {
        Some(challenge) => quiet || hello.said.as_deref() != Some(challenge),
        None => !hello.answered,
    };
    let (asked_ms, asked_for) = &hello.asked;
    let again = now_ms >= asked_ms.saturating_add(ASK_PERIOD_MS);
    if due && (again || asked_for.as_deref() != challenge) {
        ask(ctx, &mut hello, now_ms, challenge);
    }
    heard
}

/// The master's heartbeat brought `challenge`: said at once (not at the next look) when it is
/// new, so that the master counts writes again within a round trip.
pub fn heard(ctx: &Context, challenge: &str) {
    let mut hello = hello();
    let new =
        hello.said.as_deref() != Some(challenge) && hello.asked.1.as_deref() != Some(challenge);
    if new {
        ask(ctx, &mut hello, clock::now_ms(), Some(challenge));
    }
}

/// Tells the master at `now_ms` that the module runs here, with `challenge`, and notes it.
fn ask(ctx: &Context, hello: &mut Hello, now_ms: u64, challenge: Option<&str>) {
    hello.asked = (now_ms, challenge.map(str::to_owned));
    let question = hello
        .master
        .as_deref()
        .and_then(|master| question(ctx, master, challenge));
    if let Some(question) = question {
        probes::ask(question);
    }
}

/// Takes in the master's `reply` to the word with the challenge `told`; logs a change of
/// status. True when the master does not run the module.
fn take(ctx: &Context, hello: &mut Hello, told: &str, reply: &Replied) -> bool {
    hello.answered = true;
    let status = match reply {
        Replied::Accepted => {
            hello.said = Some(told.to_owned());
            "ok".to_owned()
        }
        Replied::Refused(error) => format!("refused: {error}"),
        Replied::WithoutModule => "the master does not run the lock module".to_owned(),
        Replied::Failed(error) => format!("failed: {error}"),
    };
    let stale = matches!(reply, Replied::Refused(error) if error.contains("challenge"));
    if status != hello.status && !stale {
        let master = hello.master.as_deref().unwrap_or_default();
        match reply {
            Replied::Accepted => {
                ctx.log_notice(&format!(
                    "lock: told the master {master} that the lock module runs here"
                ));
            }
            Replied::WithoutModule => ctx.log_notice(&format!(
                "lock: the master {master} does not run the lock module: this replica may be \
                 promoted as Redis would (nothing to protect) until it does"
            )),
            Replied::Refused(error) | Replied::Failed(error) => ctx.log_warning(&format!(
                "lock: cannot tell the master {master} that the lock module runs here \
                 ({error}): it counts no lock write while this replica is attached"
            )),
        }
        hello.status = status;
    }
    *reply == Replied::WithoutModule
}

/// The word for the master at `master` (`host:port`): `LOCK.REPLCONF challenge <word>
/// listening-port <port> [ip-address <ip>]`, with what this server announces (as Redis's own
/// `REPLCONF` does) and `-` before any challenge.
fn question(ctx: &Context, master: &str, challenge: Option<&str>) -> Option<Question> {
    let peer = deployment::peer(ctx, master, true)?;
    let mut arguments = vec![
        "challenge".to_owned(),
        challenge.unwrap_or("-").to_owned(),
        "listening-port".to_owned(),
        announced_port(ctx)?.to_string(),
    ];
    if let Some(ip) = server_config::get(ctx, "replica-announce-ip").filter(|ip| !ip.is_empty()) {
        arguments.extend(["ip-address".to_owned(), ip]);
    }
    Some(Question::Replconf { peer, arguments })
}

/// The port this server announces to its master: `replica-announce-port`, else `tls-port` with
/// `tls-replication yes`, else `port` (Redis's `REPLCONF listening-port`).
pub fn announced_port(ctx: &Context) -> Option<u16> {
    let positive = |name: &str| server_config::integer(ctx, name).filter(|port| *port > 0);
    let tls = server_config::get(ctx, "tls-replication").as_deref() == Some("yes");
    positive("replica-announce-port")
        .or_else(|| if tls { positive("tls-port") } else { None })
        .or_else(|| positive("port"))
        .and_then(|port| u16::try_from(port).ok())
}

/// How the last word to the master went, for `INFO lock` (`lock_insync_said`): `ok`,
/// `refused: ...`, `failed: ...`, or empty before any answer.
pub fn said() -> String {
    hello().status.clone()
}
