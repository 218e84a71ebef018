//! A TCP proxy in front of a server whose link a test can cut or stall: a replica that
//! replicates through it stops receiving its master's writes at once, as with a network
//! partition, and a client's connection can be made to hear nothing back, as when a network
//! silently drops one flow's packets. It can also refuse one source address only (a server that
//! connects out from its own `bind-source-addr`), cutting one replica's link to its master while
//! everyone else still reaches both; and the Sentinels only, whose connections it knows by the
//! name each gets first (`CLIENT SETNAME sentinel-...`).

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Forwards 127.0.0.1:`port` to a server until [`LinkProxy::cut`] or drop.
pub struct LinkProxy {
    pub port: u16,
    state: Arc<State>,
}

/// What the proxy's threads share.
struct State {
    cut: AtomicBool,
    /// How many connections were accepted: each is numbered in order, from 0.
    accepted: AtomicU64,
    /// The connection that forwards nothing (`u64::MAX`: none).
    stalled: AtomicU64,
    /// Source addresses whose connections are closed and refused.
    refused: Mutex<HashSet<IpAddr>>,
    /// Whether the Sentinels' connections are closed and refused.
    sentinels_refused: AtomicBool,
    /// Whether every connection is closed and refused, the port still held: the server
    /// behind is down ([`LinkProxy::down`]).
    down: AtomicBool,
}

impl State {
    fn refuses(&self, source: Option<IpAddr>, sentinel: &AtomicBool) -> bool {
        self.down.load(Ordering::SeqCst)
            || (sentinel.load(Ordering::SeqCst) && self.sentinels_refused.load(Ordering::SeqCst))
            || source.is_some_and(|source| self.refused.lock().expect("refused").contains(&source))
    }
}

impl LinkProxy {
    /// A proxy on a free port to 127.0.0.1:`target`.
    pub fn to(target: u16) -> Self {
        Self::at(0, target)
    }

    /// A proxy on 127.0.0.1:`port` (0: a free one) to 127.0.0.1:`target`; the same port again
    /// brings back a link that was cut.
    pub fn at(port: u16, target: u16) -> Self {
        Self::on(Self::listen(port), target)
    }

    /// Binds 127.0.0.1:`port` (0: a free one) for a proxy that [`LinkProxy::on`] starts later:
    /// the port is held from now on, so nothing else takes it in between.
    pub fn listen(port: u16) -> TcpListener {
        TcpListener::bind(("127.0.0.1", port)).expect("proxy port")
    }

    /// A proxy on `listener` (from [`LinkProxy::listen`]) to 127.0.0.1:`target`.
    pub fn on(listener: TcpListener, target: u16) -> Self {
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            cut: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            stalled: AtomicU64::new(u64::MAX),
            refused: Mutex::new(HashSet::new()),
            sentinels_refused: AtomicBool::new(false),
            down: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&state);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.cut.load(Ordering::SeqCst) {
                    return; // cut: the listener closes and connections are refused
                }
                let Ok(client) = client else { continue };
                let source = client.peer_addr().ok().map(|peer| peer.ip());
                if accepting.refuses(source, &AtomicBool::new(false)) {
                    continue; // dropped: the connection closes
                }
                let number = accepting.accepted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                // As Redis does on its own sockets: no Nagle delay on small replies (which
                // would hold a `WAIT`'s acknowledgement for a delayed-ACK period).
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let sentinel = Arc::new(AtomicBool::new(false));
                let connection = Connection {
                    number,
                    source,
                    sentinel,
                };
                pump(&client, &server, &accepting, connection.clone(), true);
                pump(&server, &client, &accepting, connection, false);
            }
        });
        Self { port, state }
    }

    /// Cuts the link: nothing more is forwarded, open connections close, new ones fail.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        // Wake the acceptor so it sees the flag and closes the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }

    /// Closes every connection from `source` and refuses new ones, until [`LinkProxy::admit`].
    pub fn refuse(&self, source: IpAddr) {
        self.state.refused.lock().expect("refused").insert(source);
    }

    /// Closes every Sentinel's connection and refuses new ones (`false`: takes them again).
    pub fn refuse_sentinels(&self, refused: bool) {
        self.state
            .sentinels_refused
            .store(refused, Ordering::SeqCst);
    }

    /// Takes connections from `source` again after [`LinkProxy::refuse`].
    pub fn admit(&self, source: IpAddr) {
        self.state.refused.lock().expect("refused").remove(&source);
    }

    /// Closes every connection and refuses new ones while the server behind is `down`, holding
    /// the port: nothing that takes the server's own port meanwhile (another test's server) is
    /// reached through this address — a Sentinel would make it a replica.
    pub fn down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// How many connections it accepted so far: the number the next one gets.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Stalls connection `number` ([`LinkProxy::accepted`]): it stays open but nothing passes
    /// either way.
    pub fn stall(&self, number: u64) {
        self.state.stalled.store(number, Ordering::SeqCst);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// One proxied connection: its number, where it comes from, and whether it is a Sentinel's.
#[derive(Clone)]
struct Connection {
    number: u64,
    source: Option<IpAddr>,
    sentinel: Arc<AtomicBool>,
}

/// Copies `from` to `to` on a thread until either closes, the link is cut or the connection is
/// refused (its source, or as a Sentinel's); once it is the stalled one, what it carries is
/// lost. `outbound`: from the client to the server, where a Sentinel names its connection.
fn pump(
    from: &TcpStream,
    to: &TcpStream,
    state: &Arc<State>,
    connection: Connection,
    outbound: bool,
) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let state = Arc::clone(state);
    thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buffer = [0u8; 16 * 1024];
        let refused = || state.refuses(connection.source, &connection.sentinel);
        while !state.cut.load(Ordering::SeqCst) && !refused() {
            let stalled = || connection.number == state.stalled.load(Ordering::SeqCst);
            if stalled() {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            match from.read(&mut buffer) {
                Ok(0) => break,
                Ok(_) if stalled() => {} // lost on the way
                Ok(n) => {
                    if outbound && names_a_sentinel(&buffer[..n]) {
                        connection.sentinel.store(true, Ordering::SeqCst);
                    }
                    if state.cut.load(Ordering::SeqCst)
                        || refused()
                        || to.write_all(&buffer[..n]).is_err()
                    {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// True when `bytes` name a Sentinel's connection (`CLIENT SETNAME sentinel-<id>-cmd`, the
/// first command Sentinel sends on each).
fn names_a_sentinel(bytes: &[u8]) -> bool {
    bytes.windows(9).any(|window| window == b"sentinel-")
}
