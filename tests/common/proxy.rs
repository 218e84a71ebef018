//! A TCP proxy in front of a server whose link a test can cut: a replica that replicates
//! through it stops receiving its master's writes at once, as with a network partition.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

/// Forwards 127.0.0.1:`port` to a server until [`LinkProxy::cut`] or drop.
pub struct LinkProxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
}

impl LinkProxy {
    /// A proxy to 127.0.0.1:`target`.
    pub fn to(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let accepting = Arc::clone(&cut);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.load(Ordering::SeqCst) {
                    return; // cut: the listener closes and connections are refused
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                pump(&client, &server, &accepting);
                pump(&server, &client, &accepting);
            }
        });
        Self { port, cut }
    }

    /// Cuts the link: nothing more is forwarded, open connections close, new ones fail.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        // Wake the acceptor so it sees the flag and closes the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies `from` to `to` on a thread until either closes or the link is cut.
fn pump(from: &TcpStream, to: &TcpStream, cut: &Arc<AtomicBool>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let cut = Arc::clone(cut);
    thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buffer = [0u8; 16 * 1024];
        while !cut.load(Ordering::SeqCst) {
            match from.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    if cut.load(Ordering::SeqCst) || to.write_all(&buffer[..n]).is_err() {
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
