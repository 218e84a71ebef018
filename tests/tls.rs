//! Servers whose only port is TLS (`port 0`, `tls-port`), replicating with TLS
//! (`tls-replication yes`), with the module.

mod common;

use common::{Server, acquire, info_field, tls};

/// A TLS replica with the module replicates from a TLS master with the module, which grants a
/// lock. Skipped (with a line on stderr) when the server binary has no TLS.
#[test]
fn a_tls_master_replicates_and_grants() {
    if !tls::supported() {
        eprintln!("skipped: the server binary has no TLS");
        return;
    }
    let master = Server::tls(&[], &[]);
    let replica = Server::tls(&[], &[]);
    replica.replicate(&master);
    assert_eq!(
        info_field(&mut replica.client(), "replication", "master_link_status").as_deref(),
        Some("up")
    );
    let token = acquire(&mut master.client(), "job", "a", 10_000, &["NOSYNC"]);
    assert!(token.is_some_and(|token| token > 0), "{token:?}");
}
