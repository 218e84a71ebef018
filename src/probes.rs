//! The module's own connections out, on a thread of their own so that the server never waits
//! for a network: asking each Sentinel the server verified (crate `deployment`) what it says of
//! the group (`SENTINEL MASTER <name>`, for [`leasehold_core::deployment`]), and asking this
//! replica's quiet master — and the server that master says it replicates from — its role
//! (`ROLE`, for the succession of [`leasehold_core::insync::replica`]).
//!
//! Also whether a replica runs the module at all, for its master
//! ([`leasehold_core::insync::checks`]).
//!
//! The main thread posts questions ([`ask`]) and takes the answers on its next tick
//! ([`answers`]); the thread touches nothing of Redis's. Each question gets one connection,
//! made within [`CONNECT_TIMEOUT`] and answered within [`REPLY_TIMEOUT`]. Credentials go only
//! where the server already sends them: the server's own `masteruser`/`masterauth`
//! ([`Credentials`]) to its own master, when it asks for them; every other question is asked
//! without. TLS connections are not made: such a server is not asked (the log says so).

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::Duration;

use leasehold_core::deployment::{self, Role, Said};
use leasehold_core::insync::checks;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Value};

/// How long a connection may take to be made.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a reply may take.
pub const REPLY_TIMEOUT: Duration = Duration::from_millis(1_000);

/// A user and password to authenticate with (`masteruser`, `masterauth`), if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// `masteruser`, when set.
    pub username: Option<String>,
    /// `masterauth`, when set.
    pub password: Option<String>,
}

/// What to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    /// The Sentinel at `address` (`ip:port`): what it says of `master_name`, asked without
    /// credentials.
    Sentinel {
        /// The Sentinel's `ip:port`.
        address: String,
        /// The group's name.
        master_name: String,
    },
    /// The replica at `host`:`port`: whether the module runs there
    /// ([`leasehold_core::insync::checks`]), asked without credentials.
    Module {
        /// Its host, as the master's `INFO replication` names it.
        host: String,
        /// Its port.
        port: u16,
    },
    /// The server at `host`:`port`: its role.
    Role {
        /// Its host.
        host: String,
        /// Its port.
        port: u16,
        /// How to authenticate: the server's own, for its own master only.
        credentials: Credentials,
    },
}

/// An answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// What the Sentinel at `address` says of `master_name`.
    Sentinel {
        /// The Sentinel's `ip:port`.
        address: String,
        /// The group's name.
        master_name: String,
        /// What it says, or what went wrong.
        said: Result<Said, String>,
    },
    /// Whether the module runs at `host:port`.
    Module {
        /// `host:port`, as asked.
        address: String,
        /// What its reply says.
        answer: checks::Answer,
    },
    /// The role of the server at `host:port`, or why it did not say.
    Role {
        /// `host:port`, as asked.
        address: String,
        /// Its role, or what went wrong (`NOPERM ...` when the user may not run `ROLE`).
        role: Result<Role, String>,
    },
}

/// The questions waiting for the thread and the answers waiting for the main thread.
#[derive(Default)]
struct Mailbox {
    questions: Vec<Question>,
    answers: Vec<Answer>,
}

struct Shared {
    mailbox: Mutex<Mailbox>,
    posted: Condvar,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        let shared = Shared {
            mailbox: Mutex::default(),
            posted: Condvar::new(),
        };
        // The thread lives as long as the server; if it cannot start, questions wait
        // unanswered and the module keeps what it knew.
        let _ = thread::Builder::new().name("lock-probes".into()).spawn(run);
        shared
    })
}

fn mailbox() -> MutexGuard<'static, Mailbox> {
    shared()
        .mailbox
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Posts `question` for the thread (one of each kind and address at a time).
pub fn ask(question: Question) {
    let mut mailbox = mailbox();
    if !mailbox.questions.contains(&question) {
        mailbox.questions.push(question);
        shared().posted.notify_one();
    }
}

/// The answers that came since the last call.
pub fn answers() -> Vec<Answer> {
    std::mem::take(&mut mailbox().answers)
}

/// The thread: answers questions as they come.
fn run() {
    loop {
        let question = {
            let mut mailbox = mailbox();
            while mailbox.questions.is_empty() {
                mailbox = shared()
                    .posted
                    .wait(mailbox)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            mailbox.questions.remove(0)
        };
        let answer = answer(question);
        mailbox().answers.push(answer);
    }
}

fn answer(question: Question) -> Answer {
    match question {
        Question::Sentinel {
            address,
            master_name,
        } => {
            let said = address
                .rsplit_once(':')
                .and_then(|(host, port)| {
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    Some((host, port.parse::<u16>().ok()?))
                })
                .ok_or_else(|| format!("bad address {address}"))
                .and_then(|(host, port)| {
                    let fields = query(
                        host,
                        port,
                        &Credentials::default(),
                        redis::cmd("SENTINEL").arg("MASTER").arg(&master_name),
                    )
                    .map_err(|error| described(&error))?;
                    deployment::sentinel_master(&bulk_strings(fields))
                        .ok_or_else(|| "no down-after-milliseconds in its reply".to_owned())
                });
            Answer::Sentinel {
                address,
                master_name,
                said,
            }
        }
        Question::Module { host, port } => {
            let reply = query(
                &host,
                port,
                &Credentials::default(),
                &redis::cmd(checks::ASK),
            );
            let error = match reply {
                Ok(Value::ServerError(error)) => Some(format!(
                    "{} {}",
                    error.code(),
                    error.details().unwrap_or_default()
                )),
                Ok(_) => None,
                Err(error) => Some(described(&error)),
            };
            let answer = error.map_or(checks::Answer::Runs, |error| checks::read_error(&error));
            Answer::Module {
                address: format!("{host}:{port}"),
                answer,
            }
        }
        Question::Role {
            host,
            port,
            credentials,
        } => {
            let reply = query(&host, port, &credentials, &redis::cmd("ROLE"));
            let role = reply.map_err(|error| described(&error)).and_then(|reply| {
                let elements: Vec<String> = match reply {
                    Value::Array(elements) => elements.into_iter().filter_map(text).collect(),
                    _ => Vec::new(),
                };
                deployment::role(&elements).ok_or_else(|| "not a server's ROLE reply".to_owned())
            });
            Answer::Role {
                address: format!("{host}:{port}"),
                role,
            }
        }
    }
}

/// An error as Redis wrote it (`NOPERM this user has no permissions ...`) where it came from
/// the server, or as the client describes it.
fn described(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => error.to_string(),
    }
}

/// A reply element as text: a string, or an integer in decimal.
fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Sends `command` to `host:port` on a new connection, authenticating with `credentials`
/// when the server asks for it.
fn query(
    host: &str,
    port: u16,
    credentials: &Credentials,
    command: &redis::Cmd,
) -> redis::RedisResult<Value> {
    let ask = |credentials: &Credentials| -> redis::RedisResult<Value> {
        let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(username) = &credentials.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &credentials.password {
            settings = settings.set_password(password);
        }
        let info = ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()?
            .set_redis_settings(settings);
        let mut con = redis::Client::open(info)?.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        con.set_read_timeout(Some(REPLY_TIMEOUT))?;
        con.set_write_timeout(Some(REPLY_TIMEOUT))?;
        command.query(&mut con)
    };
    let anonymous = Credentials::default();
    match ask(&anonymous) {
        Err(error) if error.code() == Some("NOAUTH") && credentials.password.is_some() => {
            ask(credentials)
        }
        reply => reply,
    }
}

/// The bulk and simple strings of an array reply, in order (a RESP3 map's keys and values
/// alternating); nothing for any other reply.
fn bulk_strings(value: Value) -> Vec<Vec<u8>> {
    let items = match value {
        Value::Array(items) => items,
        Value::Map(pairs) => pairs
            .into_iter()
            .flat_map(|(name, value)| [name, value])
            .collect(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .filter_map(|item| match item {
            Value::BulkString(bytes) => Some(bytes),
            Value::SimpleString(text) => Some(text.into_bytes()),
            _ => None,
        })
        .collect()
}
