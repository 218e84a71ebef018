//! The module's own connections out, on a thread of their own so that the server never waits
//! for a network: asking each Sentinel the server verified (crate `deployment`) what it says of
//! the group (`SENTINEL MASTER <name>`, for [`leasehold_core::deployment`]), asking this
//! replica's quiet master — and the server that master says it replicates from — its role
//! (`ROLE`, for the succession of [`leasehold_core::insync::replica`]), and telling this
//! replica's master that the module runs here (`LOCK.REPLCONF`, for
//! [`leasehold_core::insync::checks`]).
//!
//! The main thread posts questions ([`ask`]) and takes the answers on its next tick
//! ([`answers`]); the thread touches nothing of Redis's. Each question gets one connection,
//! made within [`CONNECT_TIMEOUT`] and answered within [`REPLY_TIMEOUT`]. The connections go
//! the way the server's own replication goes ([`Peer`]): over TLS with the server's own
//! certificates and CA when `tls-replication` is on, checking the peer's certificate but not its
//! host name, as Redis does. Credentials go only where the server already sends them: the
//! server's own `masteruser`/`masterauth` ([`Credentials`]) to its own master, when it asks for
//! them; every other question is asked without.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::Duration;

use leasehold_core::deployment::{self, Role, Said};
use leasehold_core::insync::checks::{self, Replied};
use redis::{
    ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, TlsCertificates,
    Value,
};

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

/// The server's own TLS client settings, for a connection made the way its replication is
/// (`tls-replication yes`): `tls-client-cert-file` and `tls-client-key-file`, or
/// `tls-cert-file` and `tls-key-file`; `tls-ca-cert-file` and `tls-ca-cert-dir`. Files are read
/// by the thread, at each connection (a rotated certificate is picked up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// The certificate this server presents.
    pub cert_file: String,
    /// Its private key (PEM, not encrypted: `tls-key-file-pass` is not supported).
    pub key_file: String,
    /// The CA certificates that sign the peer's certificate, in one PEM file.
    pub ca_file: Option<String>,
    /// A directory of CA certificates.
    pub ca_dir: Option<String>,
}

/// Another server, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// How to authenticate: the server's own, for its own master only.
    pub credentials: Credentials,
    /// TLS, when the server's replication uses it.
    pub tls: Option<Tls>,
}

impl Peer {
    /// `host:port`.
    #[must_use]
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    /// The Sentinel `peer`: what it says of `master_name`.
    Sentinel {
        /// The Sentinel's `ip:port`, as the answer names it.
        address: String,
        /// The Sentinel.
        peer: Peer,
        /// The group's name.
        master_name: String,
    },
    /// The server `peer`: its role.
    Role(Peer),
    /// This replica's master `peer`: the module runs here (`LOCK.REPLCONF` with `arguments`).
    Replconf {
        /// The master.
        peer: Peer,
        /// `challenge <word> listening-port <port> [ip-address <ip>]`.
        arguments: Vec<String>,
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
    /// The role of the server at `host:port`, or why it did not say.
    Role {
        /// `host:port`, as asked.
        address: String,
        /// Its role, or what went wrong (`NOPERM ...` when the user may not run `ROLE`).
        role: Result<Role, String>,
    },
    /// What this replica's master at `address` answered `LOCK.REPLCONF`.
    Replconf {
        /// `host:port`, as asked.
        address: String,
        /// The challenge told.
        challenge: String,
        /// Its answer.
        reply: Replied,
        /// While the master's writes are paused: the heartbeat it could not send, and its
        /// replication offset then ([`crate::replica_check::paused_heartbeat`]).
        paused: Option<(String, u64)>,
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
            peer,
            master_name,
        } => {
            let said = query(
                &peer,
                redis::cmd("SENTINEL").arg("MASTER").arg(&master_name),
            )
            .map_err(|error| described(&error))
            .and_then(|fields| {
                deployment::sentinel_master(&bulk_strings(fields))
                    .ok_or_else(|| "no down-after-milliseconds in its reply".to_owned())
            });
            Answer::Sentinel {
                address,
                master_name,
                said,
            }
        }
        Question::Role(peer) => {
            let reply = query(&peer, &redis::cmd("ROLE"));
            let role = reply.map_err(|error| described(&error)).and_then(|reply| {
                let elements: Vec<String> = match reply {
                    Value::Array(elements) => elements.into_iter().filter_map(text).collect(),
                    _ => Vec::new(),
                };
                deployment::role(&elements).ok_or_else(|| "not a server's ROLE reply".to_owned())
            });
            Answer::Role {
                address: peer.address(),
                role,
            }
        }
        Question::Replconf { peer, arguments } => {
            let challenge = arguments.get(1).cloned().unwrap_or_default();
            let answered = query(&peer, redis::cmd(checks::REPLCONF).arg(&arguments));
            let paused = match &answered {
                Ok(Value::Array(items)) => match items.as_slice() {
                    [heartbeat, Value::Int(offset)] => {
                        text(heartbeat.clone()).zip(u64::try_from(*offset).ok())
                    }
                    _ => None,
                },
                _ => None,
            };
            let told = error_of(answered);
            let reply =
                checks::replied(told, || error_of(query(&peer, &redis::cmd(checks::OLDER))));
            Answer::Replconf {
                address: peer.address(),
                challenge,
                reply,
                paused,
            }
        }
    }
}

/// `None` for a reply that is not an error; the error as Redis wrote it otherwise.
fn error_of(reply: redis::RedisResult<Value>) -> Option<String> {
    match reply {
        Ok(Value::ServerError(error)) => Some(format!(
            "{} {}",
            error.code(),
            error.details().unwrap_or_default()
        )),
        Ok(_) => None,
        Err(error) => Some(described(&error)),
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

/// Sends `command` to `peer` on a new connection, without credentials first, then with the
/// peer's own when the server asks for them (`NOAUTH`) or the default user may not run it
/// (`NOPERM`).
fn query(peer: &Peer, command: &redis::Cmd) -> redis::RedisResult<Value> {
    let ask = |credentials: &Credentials| -> redis::RedisResult<Value> {
        let mut con = connect(peer, credentials)?;
        con.set_read_timeout(Some(REPLY_TIMEOUT))?;
        con.set_write_timeout(Some(REPLY_TIMEOUT))?;
        command.query(&mut con)
    };
    let refused = |code: Option<&str>| matches!(code, Some("NOAUTH" | "NOPERM"));
    match ask(&Credentials::default()) {
        Err(error) if refused(error.code()) && peer.credentials.password.is_some() => {
            ask(&peer.credentials)
        }
        Ok(Value::ServerError(error))
            if refused(Some(error.code())) && peer.credentials.password.is_some() =>
        {
            ask(&peer.credentials)
        }
        reply => reply,
    }
}

/// A connection to `peer`, authenticated with `credentials` if any: over TLS when the peer's
/// [`Tls`] says so.
fn connect(peer: &Peer, credentials: &Credentials) -> redis::RedisResult<redis::Connection> {
    let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(username) = &credentials.username {
        settings = settings.set_username(username);
    }
    if let Some(password) = &credentials.password {
        settings = settings.set_password(password);
    }
    let client = match &peer.tls {
        None => redis::Client::open(
            ConnectionAddr::Tcp(peer.host.clone(), peer.port)
                .into_connection_info()?
                .set_redis_settings(settings),
        )?,
        Some(tls) => {
            let addr = ConnectionAddr::TcpTls {
                host: peer.host.clone(),
                port: peer.port,
                insecure: false,
                tls_params: None,
            };
            let built =
                redis::Client::build_with_tls(addr.into_connection_info()?, certificates(tls)?)?;
            // The chain is checked against the CA; the host name is not, as Redis does not
            // check it on replication either.
            let mut addr = built.get_connection_info().addr().clone();
            addr.set_danger_accept_invalid_hostnames(true);
            let info = built
                .get_connection_info()
                .clone()
                .set_addr(addr)
                .set_redis_settings(settings);
            redis::Client::open(info)?
        }
    };
    client.get_connection_with_timeout(CONNECT_TIMEOUT)
}

/// The certificates [`Tls`] names, read now.
fn certificates(tls: &Tls) -> redis::RedisResult<TlsCertificates> {
    let read = |path: &str| {
        std::fs::read(path).map_err(|error| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cannot read a TLS file",
                format!("{path}: {error}"),
            ))
        })
    };
    let mut roots = Vec::new();
    if let Some(file) = &tls.ca_file {
        roots.extend(read(file)?);
    }
    if let Some(dir) = &tls.ca_dir {
        let entries = std::fs::read_dir(dir).map_err(|error| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cannot read tls-ca-cert-dir",
                format!("{dir}: {error}"),
            ))
        })?;
        for entry in entries.flatten() {
            if let Ok(pem) = std::fs::read(entry.path()) {
                roots.push(b'\n');
                roots.extend(pem);
            }
        }
    }
    Ok(TlsCertificates {
        client_tls: Some(ClientTlsConfig {
            client_cert: read(&tls.cert_file)?,
            client_key: read(&tls.key_file)?,
        }),
        root_cert: (!roots.is_empty()).then_some(roots),
    })
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
