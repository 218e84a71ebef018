//! Real `redis-server` processes for the integration tests: each on a free 127.0.0.1 port in
//! its own temp dir with the module loaded, ready within a deadline, its log printed when a
//! test fails, and killed and reaped when dropped.
//!
//! A server or Sentinel may listen on TLS alone ([`Server::tls`], [`tls`]).
//!
//! `LEASEHOLD_SERVER` names the server binary (default `redis-server` on `PATH`); the module is
//! the `libleasehold.so` that `cargo build` put beside the test binaries' `deps/` folder, or
//! `LEASEHOLD_MODULE`. `LEASEHOLD_TEST_PORTS` (`first-last`) keeps the servers' ports in a
//! range of their own, for a test binary that runs beside other suites ([`free_port`]).

#![allow(dead_code)] // each test file uses its own part of the harness

pub mod cluster;
pub mod failover;
pub mod history;
pub mod proxy;
pub mod sentinel;
pub mod tls;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, Value};
use tempfile::TempDir;

/// How long a server may take to start answering `PING`.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// How many ports a first start tries before it gives up.
const PORT_ATTEMPTS: usize = 5;

/// A running `redis-server` with the lock module, or a Sentinel.
pub struct Server {
    pub port: u16,
    dir: TempDir,
    kind: Kind,
    args: Vec<String>,
    child: Option<Child>,
    /// Whether the server was started before: a restart keeps its port.
    launched: bool,
    /// Whether it listens on TLS alone, `port` its `tls-port` ([`tls::server_args`]).
    tls: bool,
}

/// How a start ended.
enum Ready {
    /// The server's own process answers on its port.
    Yes,
    /// The process exited because another one holds its port.
    PortTaken,
    /// The process exited for another reason (its log says which).
    Exited,
}

/// What a [`Server`] runs as.
enum Kind {
    /// A data server with the module and these module arguments; `None`: without the module
    /// (for `MODULE LOAD`).
    Data(Option<Vec<String>>),
    /// A Sentinel, with `sentinel.conf` in its directory.
    Sentinel,
    /// A data server started from `redis.conf` in its directory, which loads the module.
    Config,
}

impl Server {
    /// A server with no persistence and the given extra `redis.conf`-style arguments
    /// (`["--appendonly", "yes"]`); later arguments override earlier ones.
    pub fn start(args: &[&str]) -> Self {
        Self::with_module_args(&[], args)
    }

    /// A server whose `--loadmodule` line passes `module_args` to the module
    /// (`["max-ttl-ms", "1000"]`).
    pub fn with_module_args(module_args: &[&str], args: &[&str]) -> Self {
        Self::data(Some(module_args), args, false)
    }

    /// Whether this server loads the module when it starts.
    pub const fn loads_module(&self) -> bool {
        matches!(self.kind, Kind::Data(Some(_)) | Kind::Config)
    }

    /// A server without the module, to load it with `MODULE LOAD`.
    pub fn without_module(args: &[&str]) -> Self {
        Self::data(None, args, false)
    }

    /// Like [`Self::with_module_args`], listening on TLS alone ([`tls::server_args`]):
    /// clients, replicas and Sentinels reach it on `port` with TLS, and it replicates with TLS.
    pub fn tls(module_args: &[&str], args: &[&str]) -> Self {
        Self::data(Some(module_args), args, true)
    }

    /// Like [`Self::tls`], without the module.
    pub fn tls_without_module(args: &[&str]) -> Self {
        Self::data(None, args, true)
    }

    /// Starts a data server with the module and `module_args` (`None`: without the module),
    /// on TLS alone when `tls`.
    fn data(module_args: Option<&[&str]>, args: &[&str], tls: bool) -> Self {
        let mut server = Self::new(module_args, args);
        server.tls = tls;
        server.launch();
        server
    }

    /// Starts a server whose module arguments must make it refuse to start, and returns its
    /// log.
    pub fn refused(module_args: &[&str]) -> String {
        let mut server = Self::new(Some(module_args), &[]);
        server.start_refused()
    }

    /// Starts the stopped server again on the same port, directory and arguments, when what
    /// it keeps (a damaged RDB) must make it refuse to start; returns its log.
    pub fn restart_refused(&mut self) -> String {
        assert!(self.child.is_none(), "stop the server before restarting it");
        self.start_refused()
    }

    /// Starts the process and waits for it to exit by itself; returns the log.
    fn start_refused(&mut self) -> String {
        // Held by the server, so that a failed assertion still kills it on drop.
        self.child = Some(self.spawn());
        let deadline = Instant::now() + READY_WITHIN;
        while self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        {
            assert!(
                Instant::now() < deadline,
                "the server started:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = None;
        self.log()
    }

    /// A Sentinel (the server binary in `--sentinel` mode) started with `config` as its
    /// `sentinel.conf`, which it may rewrite.
    pub fn sentinel(config: &str) -> Self {
        Self::sentinel_on(config, false)
    }

    /// Like [`Self::sentinel`], listening on TLS alone and reaching the servers it watches
    /// and the other Sentinels with TLS ([`tls::server_args`]).
    pub fn tls_sentinel(config: &str) -> Self {
        Self::sentinel_on(config, true)
    }

    /// Starts a Sentinel with `config`, on TLS alone when `tls`.
    fn sentinel_on(config: &str, tls: bool) -> Self {
        let mut sentinel = Self::new(None, &[]);
        sentinel.kind = Kind::Sentinel;
        sentinel.tls = tls;
        std::fs::write(sentinel.dir().join("sentinel.conf"), config).expect("sentinel.conf");
        sentinel.launch();
        sentinel
    }

    /// A data server started from a `redis.conf` in its directory that loads the module with
    /// `module_args` and then says `config` (`"replica-priority 10\n"`): `CONFIG REWRITE` has
    /// a file to write, and [`Self::restart`] reads it back. The harness's own settings (port,
    /// directory, no persistence) still come on the command line.
    pub fn from_config(module_args: &[&str], config: &str) -> Self {
        let mut server = Self::new(None, &[]);
        server.kind = Kind::Config;
        let loadmodule = format!(
            "loadmodule {} {}\n",
            module_path().display(),
            module_args.join(" ")
        );
        std::fs::write(server.config_path(), loadmodule + config).expect("redis.conf");
        server.launch();
        server
    }

    /// The `redis.conf` of a server started with [`Self::from_config`].
    pub fn config_path(&self) -> PathBuf {
        self.dir().join("redis.conf")
    }

    fn new(module_args: Option<&[&str]>, args: &[&str]) -> Self {
        let owned = |list: &[&str]| list.iter().map(|arg| (*arg).to_owned()).collect();
        Self {
            port: free_port(),
            dir: tempfile::Builder::new()
                .prefix("leasehold-test-")
                .tempdir()
                .expect("temp dir"),
            kind: Kind::Data(module_args.map(owned)),
            args: owned(args),
            child: None,
            launched: false,
            tls: false,
        }
    }

    /// Starts the process and waits until it answers. A first start whose port another
    /// process took since [`free_port`] picked it (a test binary's servers start in parallel,
    /// and outgoing connections draw from the same ports) moves to a new port; a restart keeps
    /// its port, which others already know.
    fn launch(&mut self) {
        let first = !self.launched;
        self.launched = true;
        for _ in 0..PORT_ATTEMPTS {
            let logged_before = self.log().len();
            self.child = Some(self.spawn());
            match self.wait_ready(logged_before) {
                Ready::Yes => return,
                Ready::PortTaken if first => self.port = free_port(),
                Ready::PortTaken | Ready::Exited => {
                    panic!("server exited at start:\n{}", self.log())
                }
            }
        }
        panic!("no free port in {PORT_ATTEMPTS} attempts:\n{}", self.log());
    }

    fn spawn(&self) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let mut command = Command::new(server_binary());
        match self.kind {
            Kind::Sentinel => {
                command
                    .arg(self.dir().join("sentinel.conf"))
                    .arg("--sentinel");
            }
            Kind::Config => {
                command.arg(self.config_path());
            }
            Kind::Data(_) => {}
        }
        if self.tls {
            command.args(tls::server_args(self.port));
        } else {
            command.args(["--port", &self.port.to_string()]);
        }
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--dir", &self.dir.path().to_string_lossy()])
            .args(["--daemonize", "no", "--protected-mode", "no"]);
        if let Kind::Data(Some(module_args)) = &self.kind {
            command
                .args(["--loadmodule", &module_path().to_string_lossy()])
                .args(module_args);
        }
        if let Kind::Data(_) | Kind::Config = &self.kind {
            command
                .args(["--save", "", "--appendonly", "no"])
                .args(["--enable-debug-command", "yes"])
                .args(["--repl-diskless-sync-delay", "0"]);
        }
        command
            .args(&self.args)
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary()))
    }

    /// Waits until this server's own process answers `PING` (not while it loads its data):
    /// another server that holds the port answers too, so the answer is checked against
    /// `INFO server`'s `process_id`. What the server logged from `logged_before` (bytes) on
    /// is this start's.
    fn wait_ready(&mut self, logged_before: usize) -> Ready {
        let deadline = Instant::now() + READY_WITHIN;
        let pid = self.child.as_ref().expect("spawned").id();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(_)) = child.try_wait()
            {
                self.child = None;
                let this_start = self.log().split_off(logged_before);
                return if this_start.contains("Address already in use") {
                    Ready::PortTaken
                } else {
                    Ready::Exited
                };
            }
            let answering = self.try_client().ok().and_then(|mut con| {
                redis::cmd("PING").query::<String>(&mut con).ok()?;
                info_field(&mut con, "server", "process_id")
            });
            if answering == Some(pid.to_string()) {
                return Ready::Yes;
            }
            assert!(
                Instant::now() < deadline,
                "server not ready within {READY_WITHIN:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A RESP2 connection, or the error if the server does not answer within 5 s.
    pub fn try_client(&self) -> redis::RedisResult<Connection> {
        self.open("")?
            .get_connection_with_timeout(Duration::from_secs(5))
    }

    /// `redis://127.0.0.1:port`, or `rediss://` for a server on TLS: a client of that URL
    /// must present a certificate ([`Self::open`], [`tls::client`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A client of [`Self::url`] followed by `query` (`"/?protocol=resp3"`), with the
    /// harness's certificates for a server on TLS.
    pub fn open(&self, query: &str) -> redis::RedisResult<redis::Client> {
        let url = format!("{}{query}", self.url());
        if self.tls {
            tls::client(&url)
        } else {
            redis::Client::open(url)
        }
    }

    /// A RESP2 connection.
    pub fn client(&self) -> Connection {
        self.try_client().expect("connect")
    }

    /// A RESP3 connection.
    pub fn resp3(&self) -> Connection {
        self.open("/?protocol=resp3")
            .and_then(|client| client.get_connection())
            .expect("connect with RESP3")
    }

    /// The server's data directory (RDB, AOF).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `kill -9`: the process dies at once, losing whatever it had not written.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server process: `SIGSTOP` freezes it as a long
    /// GC pause or a hung VM would, with its connections open.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server runs").id();
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Whether the server's process still runs (it may have stopped by itself: a full sync it
    /// could not load).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// `SHUTDOWN` with the given mode (`SAVE`, `NOSAVE`), then waits for the process to end;
    /// asked again while the server refuses (it is writing its first AOF after a full sync:
    /// `Writing initial AOF, can't exit`).
    pub fn shutdown(&mut self, mode: &str) {
        let deadline = Instant::now() + READY_WITHIN;
        while let Some(child) = self.child.as_mut() {
            if !matches!(child.try_wait(), Ok(None)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not shut down:\n{}",
                self.log()
            );
            if let Ok(mut con) = self.try_client() {
                let _ = redis::cmd("SHUTDOWN").arg(mode).exec(&mut con);
            }
            thread::sleep(Duration::from_millis(100));
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, directory and arguments.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        self.launch();
    }

    /// Like [`Self::restart`], with `extra` arguments for this start only
    /// (`["--replicaof", "127.0.0.1", "6380"]`: back as a replica, as an orchestrator that
    /// rewrote its configuration would bring it).
    pub fn restart_with(&mut self, extra: &[&str]) {
        let kept = self.args.len();
        self.args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        self.restart();
        self.args.truncate(kept);
    }

    /// `kill -9`, then starts again with nothing: no RDB (not even the one a replica keeps from
    /// its full sync), no AOF — a container that lost its volume.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.wipe();
        self.restart();
    }

    /// Deletes the module's lease horizon (`dump.leases`) of a stopped server, as a machine
    /// crash can lose its last write: what a restart then knows comes from its data alone.
    pub fn forget_leases(&mut self) {
        assert!(self.child.is_none(), "stop the server first");
        let _ = std::fs::remove_file(self.dir().join("dump.leases"));
    }

    /// Deletes what a stopped server kept: its RDB, its AOF and the module's files (its state
    /// and its lease horizon).
    pub fn wipe(&mut self) {
        assert!(self.child.is_none(), "stop the server before wiping it");
        let _ = std::fs::remove_file(self.dir().join("dump.rdb"));
        let _ = std::fs::remove_file(self.dir().join("dump.leasehold"));
        let _ = std::fs::remove_file(self.dir().join("dump.leases"));
        let _ = std::fs::remove_dir_all(self.dir().join("appendonlydir"));
    }

    /// Makes this server a replica of `master` and waits until the link is up and in sync.
    pub fn replicate(&self, master: &Server) {
        self.replicate_through(master.port);
    }

    /// Like [`Self::replicate`], connecting to `port` (a proxy in front of `master`).
    pub fn replicate_through(&self, port: u16) {
        let mut con = self.client();
        redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(port)
            .exec(&mut con)
            .expect("REPLICAOF");
        wait_until("replica link up", || {
            info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
        });
        if matches!(self.kind, Kind::Data(Some(_)) | Kind::Config) {
            // The master counts nothing until the replica has said it runs the module.
            wait_until("the replica told its master it runs the module", || {
                info_field(&mut con, "lock", "lock_insync_said")
                    .is_some_and(|said| !said.is_empty())
            });
        }
    }
}

/// Waits until `replicas` replicas acknowledged every write made on `con` (`WAIT`, which
/// counts from the calling connection's own last write).
pub fn wait_replicas(con: &mut Connection, replicas: usize) {
    let acked: usize = redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query(con)
        .expect("WAIT");
    assert!(acked >= replicas, "only {acked} replicas caught up");
}

impl Drop for Server {
    /// Kills the process; prints its log when the test panicked, and with
    /// `LEASEHOLD_KEEP_LOGS=<dir>` copies it to `<dir>/<kind>-<port>.log` (to trace a run that
    /// passed, as `make chaos`'s control comparison needs).
    fn drop(&mut self) {
        if let Some(dir) = std::env::var_os("LEASEHOLD_KEEP_LOGS") {
            let kind = if matches!(self.kind, Kind::Sentinel) {
                "sentinel"
            } else {
                "server"
            };
            let kept = std::path::Path::new(&dir).join(format!("{kind}-{}.log", self.port));
            let _ =
                std::fs::create_dir_all(&dir).and_then(|()| std::fs::copy(self.log_path(), kept));
        }
        if std::thread::panicking() {
            eprintln!(
                "--- log of the server on port {} ---\n{}",
                self.port,
                self.log()
            );
        }
        self.kill();
    }
}

/// A free port on 127.0.0.1 (bound, read, released), never one this process handed out
/// before: the kernel may offer a port again as soon as it is released, and this binary's
/// tests start servers in parallel. With `LEASEHOLD_TEST_PORTS=first-last`, one of that range
/// (outside the kernel's ephemeral ports, which other suites' servers and every outgoing
/// connection take): a server this binary killed then never hands its port to another
/// process's server, which its replicas, its cluster or its Sentinels would reach.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let range = std::env::var("LEASEHOLD_TEST_PORTS")
        .ok()
        .and_then(|range| {
            let (first, last) = range.split_once('-')?;
            Some(first.parse::<u16>().ok()?..=last.parse::<u16>().ok()?)
        });
    let mut handed_out = HANDED_OUT.lock().expect("ports");
    let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    if let Some(range) = range {
        let port = range
            .filter(|port| !handed_out.contains(port))
            .find(|port| free(*port))
            .expect("a free port in LEASEHOLD_TEST_PORTS");
        handed_out.insert(port);
        return port;
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("free port");
        if handed_out.insert(port) {
            return port;
        }
    }
}

fn server_binary() -> String {
    std::env::var("LEASEHOLD_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The module `cargo build` produced: `target/<profile>/libleasehold.so`, the parent of the
/// test binary's `deps/` folder.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("LEASEHOLD_MODULE") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let module = profile_dir.join("libleasehold.so");
    assert!(
        module.exists(),
        "{} is missing: run `cargo build` (or `make test`) first",
        module.display()
    );
    module
}

/// The wall clock in unix ms, as the server reads it.
pub fn now_ms() -> i64 {
    let elapsed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(elapsed.as_millis()).expect("ms fit")
}

/// Polls `condition` every 20 ms for up to 20 s.
pub fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    wait_within(Duration::from_secs(20), what, condition);
}

/// Polls `condition` every 20 ms for up to `within`.
pub fn wait_within(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One field of `INFO section`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::to_owned)
}

/// Runs a command and returns its reply as a value, errors included.
pub fn call(con: &mut Connection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    match cmd.query::<Value>(con) {
        Ok(value) => value,
        Err(error) => panic!("{args:?} failed on the connection: {error}"),
    }
}

/// Promotes the server by hand, as a person would, past the in-sync set's refusal of a replica
/// outside it (`lock.allow-unsafe-promotion`, one shot, then `REPLICAOF NO ONE`): for tests
/// about tokens across promotions, not about which replica may be promoted.
pub fn promote(con: &mut Connection) {
    call(
        con,
        &["CONFIG", "SET", "lock.allow-unsafe-promotion", "yes"],
    );
    call(con, &["REPLICAOF", "NO", "ONE"]);
}

/// Runs a command that must fail and returns the error text as the server sent it
/// (`ERR ...`, `WRONGTYPE ...`).
pub fn error(con: &mut Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    match cmd.query::<Value>(con) {
        Ok(value) => panic!("{args:?} should fail, replied {value:?}"),
        Err(error) => described(&error),
    }
}

/// A server's error as it sent it: `CODE detail`.
pub fn described(error: &redis::RedisError) -> String {
    let code = error.code().unwrap_or("");
    let detail = error.detail().unwrap_or("");
    format!("{code} {detail}").trim().to_owned()
}

/// `LOCK.ACQUIRE key owner ttl-ms` as its reply: the token, or the error as the server sent it
/// (`held` when the lock is another's).
pub fn try_acquire(
    con: &mut Connection,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> Result<i64, String> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl_ms)
        .query::<Option<i64>>(con)
        .map_err(|error| described(&error))
        .and_then(|token| token.ok_or_else(|| "held".to_owned()))
}

/// `DUMP key`: the serialized value, ending with its RDB version (2 bytes) and a CRC64 of
/// everything before it.
pub fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}

/// `RESTORE key ttl payload`: `OK`, or the error.
pub fn restore(
    con: &mut Connection,
    key: &str,
    ttl: u64,
    payload: &[u8],
) -> redis::RedisResult<String> {
    redis::cmd("RESTORE")
        .arg(key)
        .arg(ttl)
        .arg(payload)
        .query(con)
}

/// `LOCK.ACQUIRE key owner ttl [options...]`: the token, or `None` when refused.
pub fn acquire(
    con: &mut impl ConnectionLike,
    key: &str,
    owner: &str,
    ttl: u64,
    options: &[&str],
) -> Option<i64> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .arg(options)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

/// A client blocked in `LOCK.ACQUIRE key owner 60000 [options] WAIT timeout`: its client id
/// and the thread that returns its reply (the token, or `None`).
pub struct Waiting {
    pub id: i64,
    pub reply: JoinHandle<redis::RedisResult<Option<i64>>>,
}

/// Starts a client waiting for `key` as `owner`.
pub fn wait_for(server: &Server, key: &str, owner: &str, timeout_ms: u64) -> Waiting {
    wait_with(server, key, owner, timeout_ms, &[])
}

/// Starts a client waiting for `key` as `owner`, with more options (`["SHARED"]`).
pub fn wait_with(
    server: &Server,
    key: &str,
    owner: &str,
    timeout_ms: u64,
    options: &[&str],
) -> Waiting {
    let mut con = server.client();
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut con)
        .expect("CLIENT ID");
    let mut command = redis::cmd("LOCK.ACQUIRE");
    command
        .arg(key)
        .arg(owner)
        .arg(60_000)
        .arg(options)
        .arg("WAIT")
        .arg(timeout_ms);
    let reply = thread::spawn(move || command.query(&mut con));
    Waiting { id, reply }
}

/// The token a waiter was granted (panics if it was not).
pub fn granted(waiting: Waiting) -> i64 {
    waiting
        .reply
        .join()
        .expect("waiter thread")
        .expect("reply")
        .expect("granted")
}

/// How many clients wait for `key` (`LOCK.INFO`'s `waiters`), -1 when it is free.
pub fn waiters(con: &mut Connection, key: &str) -> i64 {
    match info_fields(con, key)
        .as_ref()
        .and_then(|f| f.get("waiters"))
    {
        Some(Value::Int(count)) => *count,
        _ => -1,
    }
}

/// Waits until `count` clients wait for `key` (the lock must be held).
pub fn queued(con: &mut Connection, key: &str, count: i64) {
    wait_until(&format!("{count} waiters on {key}"), || {
        waiters(con, key) == count
    });
}

/// Waits until the replica has every write so far, including hand-overs made by timers:
/// `WAIT` counts from the calling connection's own last write, so write something first.
pub fn sync_replicas(con: &mut Connection) {
    call(con, &["SET", "sync-marker", "1"]);
    wait_replicas(con, 1);
}

/// `LOCK.INFO key` as its fields by name, in RESP2 or RESP3; `None` when free.
pub fn info_fields(con: &mut impl ConnectionLike, key: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO")
}

/// `LOCK.INFO` of a shared lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedInfo {
    pub limit: i64,
    pub holders: i64,
    pub token: i64,
    pub ttl: i64,
    pub waiters: i64,
    /// (owner, token, ttl, holds) per holder, in token order.
    pub owners: Vec<(String, i64, i64, i64)>,
}

/// `LOCK.INFO key` of a shared lock, or `None` when free (panics for an exclusive lock).
pub fn shared_info(con: &mut impl ConnectionLike, key: &str) -> Option<SharedInfo> {
    let fields = info_fields(con, key)?;
    let int = |fields: &HashMap<String, Value>, name: &str| match fields.get(name) {
        Some(Value::Int(n)) => *n,
        other => panic!("LOCK.INFO field {name}: {other:?}"),
    };
    assert_eq!(
        fields.get("mode"),
        Some(&Value::SimpleString("shared".into())),
        "{fields:?}"
    );
    let Some(Value::Array(owners)) = fields.get("owners") else {
        panic!("LOCK.INFO owners: {fields:?}");
    };
    let owners = owners
        .iter()
        .map(|owner| {
            let owner: HashMap<String, Value> =
                redis::from_redis_value(owner.clone()).expect("an owner's fields");
            let name = match owner.get("owner") {
                Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                other => panic!("owner: {other:?}"),
            };
            (
                name,
                int(&owner, "token"),
                int(&owner, "ttl"),
                int(&owner, "holds"),
            )
        })
        .collect();
    Some(SharedInfo {
        limit: int(&fields, "limit"),
        holders: int(&fields, "holders"),
        token: int(&fields, "token"),
        ttl: int(&fields, "ttl"),
        waiters: int(&fields, "waiters"),
        owners,
    })
}

/// `LOCK.INFO` as (owner, token, ttl, holds, waiters).
pub type LockInfo = (String, i64, i64, i64, i64);

/// `LOCK.INFO key`, or `None` when free.
pub fn lock_info(con: &mut impl ConnectionLike, key: &str) -> Option<LockInfo> {
    let fields = info_fields(con, key)?;
    let int = |name: &str| match fields.get(name) {
        Some(Value::Int(n)) => *n,
        other => panic!("LOCK.INFO field {name}: {other:?}"),
    };
    let owner = match fields.get("owner") {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("LOCK.INFO owner: {other:?}"),
    };
    Some((
        owner,
        int("token"),
        int("ttl"),
        int("holds"),
        int("waiters"),
    ))
}

/// Who holds the lock `key` now, or `None` when it is free.
pub fn holder(con: &mut impl ConnectionLike, key: &str) -> Option<String> {
    lock_info(con, key).map(|info| info.0)
}

/// The same holding as `before` (from [`lock_info`]): owner, token and hold count equal, the
/// lease no longer and at most `elapsed_ms` shorter.
pub fn assert_same_holding(before: &LockInfo, after: &LockInfo, elapsed_ms: i64) {
    assert_eq!(
        (&after.0, after.1, after.3),
        (&before.0, before.1, before.3),
        "owner, token, holds"
    );
    assert!(
        after.2 <= before.2 && after.2 > before.2 - elapsed_ms,
        "lease kept: {} then {}",
        before.2,
        after.2
    );
}

/// The raw bytes of one reply, for checking the exact RESP encoding: sends `HELLO 3` first
/// when `resp3`.
pub fn raw_reply(port: u16, resp3: bool, args: &[&str]) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let encode = |args: &[&str]| {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend(format!("${}\r\n{arg}\r\n", arg.len()).into_bytes());
        }
        out
    };
    if resp3 {
        stream.write_all(&encode(&["HELLO", "3"])).expect("send");
        let mut scratch = [0u8; 4096];
        // The HELLO map is small and arrives in one read on loopback.
        let _ = stream.read(&mut scratch).expect("HELLO reply");
    }
    stream.write_all(&encode(args)).expect("send");
    let mut reply = vec![0u8; 4096];
    let n = stream.read(&mut reply).expect("reply");
    reply.truncate(n);
    reply
}

/// `LOCK.INSYNC`'s reply, as the tuple it comes in.
pub type Reply = (u64, u64, u64, u64, String, String);

/// `LOCK.INSYNC`: what a client needs to count its writes (the tests' reading of its reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InSync {
    /// The master's replication offset: it covers every write sent before on the connection.
    pub offset: u64,
    /// The lowest offset every member acknowledged.
    pub acked: u64,
    pub members: u64,
    pub required: u64,
    pub replid: String,
    pub replid2: String,
}

impl From<Reply> for InSync {
    fn from((offset, acked, members, required, replid, replid2): Reply) -> Self {
        Self {
            offset,
            acked,
            members,
            required,
            replid,
            replid2,
        }
    }
}

/// Sends `LOCK.INSYNC` on `con`.
pub fn insync(con: &mut Connection) -> InSync {
    redis::cmd("LOCK.INSYNC")
        .query::<Reply>(con)
        .expect("LOCK.INSYNC")
        .into()
}

/// Waits until the master of `con` has a member in its in-sync set: from then on its synced
/// writes, hand-overs included, are held for that replica.
pub fn wait_for_member(con: &mut Connection) {
    wait_until("a replica in the in-sync set", || insync(con).members > 0);
}

/// Takes the free lock `key` for `owner` with a `ttl_ms` lease and counts it as the clients
/// do (`LOCK.INSYNC`, `WAIT` for the set's members, `LOCK.INSYNC`): panics unless every member
/// of the master's in-sync set has it within 5 s, and the set is as large as the master
/// requires. `WAIT` counts any replica, so one outside the set (an old master just re-attached)
/// can end it before a member acknowledged: it is asked again until then. Returns the token.
pub fn acquire_counted(con: &mut Connection, key: &str, owner: &str, ttl_ms: u64) -> i64 {
    let token = acquire(con, key, owner, ttl_ms, &[]).expect("a free lock");
    let before = insync(con);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = insync(con);
    while after.acked < before.offset && Instant::now() < deadline {
        call(con, &["WAIT", &before.members.to_string(), "100"]);
        after = insync(con);
    }
    assert!(
        after.members >= after.required && after.acked >= before.offset,
        "{key} not counted: {before:?} {after:?}"
    );
    token
}

/// A client process: a shell with a connection of its own (bash's `/dev/tcp`) that opens a
/// session with a grace of `grace_ms`, sends `command` (words without spaces) with `SESSION
/// <id>` appended, then waits on a builtin — no child process shares its socket, so `kill -9`
/// closes it. Returns the process and the command's integer reply (a token, an epoch).
pub fn session_process(port: u16, grace_ms: u64, command: &str) -> (Child, i64) {
    let script = format!(
        r#"exec 3<>/dev/tcp/127.0.0.1/{port}
printf 'LOCK.SESSION OPEN GRACE {grace_ms}\r\n' >&3
read -r _ <&3; read -r _ <&3; read -r id <&3; read -r _ <&3
printf '{command} SESSION %s\r\n' "${{id%$'\r'}}" >&3
read -r reply <&3
echo "${{reply%$'\r'}}"
read -r -t 600 _"#
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bash");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the reply");
    let reply = line
        .trim()
        .strip_prefix(':')
        .and_then(|reply| reply.parse().ok())
        .unwrap_or_else(|| panic!("{command} got {line:?}"));
    (child, reply)
}

/// A child process, killed (`SIGKILL`) and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the test `name` of this very test binary in a process of its own, with `url` in the
/// environment variable `var` (which that test needs to do anything), and waits until it
/// prints `marker` and a number (`HOLDING <token>`, `LEADING <epoch>`): the process, killed
/// with `kill -9` when dropped, and the number.
pub fn test_process(name: &str, (var, url): (&str, &str), marker: &str) -> (Killed, u64) {
    let exe = std::env::current_exe().expect("this test binary");
    let child = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(var, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test process");
    let mut child = Killed(child);
    let stdout = child.0.stdout.take().expect("its stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains(marker))
        .unwrap_or_else(|| panic!("{name} never printed {marker}"));
    let (_, number) = line.split_once(marker).expect("the marker");
    (
        child,
        number.trim().parse().expect("a number after the marker"),
    )
}
