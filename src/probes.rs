//! The module's own connections out, on a thread of their own so that the server never waits
//! for a network: asking each Sentinel heard of for its `down-after-milliseconds`
//! (`SENTINEL MASTER <name>`, for [`leasehold_core::deployment`]), and asking another server who
//! it is and whether it is a master (`INFO server replication`): this replica's quiet master
//! (the succession of [`leasehold_core::insync::replica`]), and the master the Sentinels name
//! before a replaced master follows it ([`leasehold_core::deployment::Record`]).
//!
//! Also whether a replica runs the module at all, for its master
//! ([`leasehold_core::insync::checks`]).
//!
//! The main thread posts questions ([`ask`]) and takes the answers on its next tick
//! ([`answers`]); the thread touches nothing of Redis's. Each question gets one connection,
//! made within [`CONNECT_TIMEOUT`] and answered within [`REPLY_TIMEOUT`], with the server's own
//! `masteruser`/`masterauth` when given ([`Credentials`]) — Sentinels and masters of one group
//! usually share them. TLS connections are not made: such a Sentinel is not asked, and its
//! timing is not learned (the log says so).

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::Duration;

use leasehold_core::deployment::{self, Identity};
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
    /// The Sentinel at `address` (`ip:port`): its `down-after-milliseconds` for `master_name`.
    DownAfter {
        /// The Sentinel's `ip:port`.
        address: String,
        /// The group's name.
        master_name: String,
        /// How to authenticate if the Sentinel asks for it.
        credentials: Credentials,
    },
    /// The replica at `host`:`port`: whether the module runs there
    /// ([`leasehold_core::insync::checks`]), asked without credentials.
    Module {
        /// Its host, as the master's `INFO replication` names it.
        host: String,
        /// Its port.
        port: u16,
    },
    /// The server at `host`:`port`: who it is, and whether it is a master.
    Identity {
        /// Its host, as this replica's `replicaof` names it.
        host: String,
        /// Its port.
        port: u16,
        /// How to authenticate.
        credentials: Credentials,
    },
}

/// An answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The Sentinel at `address` watches `master_name` with `down-after-milliseconds` of
    /// `Ok(ms)`.
    DownAfter {
        /// The Sentinel's `ip:port`.
        address: String,
        /// The group's name.
        master_name: String,
        /// The value, or what went wrong.
        ms: Result<u64, String>,
    },
    /// Whether the module runs at `host:port`.
    Module {
        /// `host:port`, as asked.
        address: String,
        /// What its reply says.
        answer: checks::Answer,
    },
    /// Who the server at `host:port` is, or why it did not say.
    Identity {
        /// `host:port`, as asked.
        address: String,
        /// Its run id and role, or what went wrong.
        identity: Result<Identity, String>,
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
        Question::DownAfter {
            address,
            master_name,
            credentials,
        } => {
            let ms = address
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                .ok_or_else(|| format!("bad address {address}"))
                .and_then(|(host, port)| {
                    let fields = query(
                        host,
                        port,
                        &credentials,
                        redis::cmd("SENTINEL").arg("MASTER").arg(&master_name),
                    )
                    .map_err(|error| error.to_string())?;
                    deployment::sentinel_master(&bulk_strings(fields))
                        .ok_or_else(|| "no down-after-milliseconds in its reply".to_owned())
                });
            Answer::DownAfter {
                address,
                master_name,
                ms,
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
                Err(error) => Some(match (error.code(), error.detail()) {
                    (Some(code), Some(detail)) => format!("{code} {detail}"),
                    _ => error.to_string(),
                }),
            };
            let answer = error.map_or(checks::Answer::Runs, |error| checks::read_error(&error));
            Answer::Module {
                address: format!("{host}:{port}"),
                answer,
            }
        }
        Question::Identity {
            host,
            port,
            credentials,
        } => {
            let info = redis::cmd("INFO").arg("server").arg("replication").clone();
            let reply = query(&host, port, &credentials, &info).map_err(|error| error.to_string());
            let identity = reply.and_then(|info| {
                let text = match info {
                    Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Value::VerbatimString { text, .. } => text,
                    _ => String::new(),
                };
                deployment::identity(&text).ok_or_else(|| "no run_id and role".to_owned())
            });
            Answer::Identity {
                address: format!("{host}:{port}"),
                identity,
            }
        }
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
