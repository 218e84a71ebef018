//! A TCP proxy in front of a server whose link a test can cut or stall: a replica that
//! replicates through it stops receiving its master's writes at once, as with a network
//! partition, and a client's connection can be made to hear nothing back, as when a network
//! silently drops one flow's packets. It can also refuse one source address only (a server that
//! connects out from its own `bind-source-addr`), cutting one replica's link to its master while
//! everyone else still reaches both.

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
}

impl State {
    fn refuses(&self, source: Option<IpAddr>) -> bool {
        source.is_some_and(|source| self.refused.lock().expect("refused").contains(&source))
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
        });
        let accepting = Arc::clone(&state);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.cut.load(Ordering::SeqCst) {
                    return; // cut: the listener closes and connections are refused
                }
                let Ok(client) = client else { continue };
                let source = client.peer_addr().ok().map(|peer| peer.ip());
                if accepting.refuses(source) {
                    continue; // dropped: the connection closes
                }
                let number = accepting.accepted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                // As Redis does on its own sockets: no Nagle delay on small replies (which
                // would hold a `WAIT`'s acknowledgement for a delayed-ACK period).
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                pump(&client, &server, &accepting, (number, source));
                pump(&server, &client, &accepting, (number, source));
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

    /// Takes connections from `source` again after [`LinkProxy::refuse`].
    pub fn admit(&self, source: IpAddr) {
        self.state.refused.lock().expect("refused").remove(&source);
    }

    /// Stalls the connection opened last: it stays open but nothing passes either way.
    pub fn stall_last_connection(&self) {
        let last = self.state.accepted.load(Ordering::SeqCst).saturating_sub(1);
        self.state.stalled.store(last, Ordering::SeqCst);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies `from` to `to` on a thread until either closes, the link is cut or the connection's
/// `source` is refused; once connection `number` is the stalled one, what it carries is lost.
fn pump(
    from: &TcpStream,
    to: &TcpStream,
    state: &Arc<State>,
    (number, source): (u64, Option<IpAddr>),
) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let state = Arc::clone(state);
    thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buffer = [0u8; 16 * 1024];
        while !state.cut.load(Ordering::SeqCst) && !state.refuses(source) {
            let stalled = || number == state.stalled.load(Ordering::SeqCst);
            if stalled() {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            match from.read(&mut buffer) {
                Ok(0) => break,
                Ok(_) if stalled() => {} // lost on the way
                Ok(n) => {
                    if state.cut.load(Ordering::SeqCst) || to.write_all(&buffer[..n]).is_err() {
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
