//! Servers whose only port is TLS (`port 0`, `tls-port`), replicating with TLS
//! (`tls-replication yes`), with the module.

mod common;

use common::{Server, acquire, acquire_counted, info_field, tls, wait_until};

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

/// A master and two replicas on TLS alone: each replica tells its master over TLS, with the
/// server's own certificate, that it runs the module — the master's certificate names another
/// host, which Redis's replication takes and so does the module — so both join the in-sync set,
/// are promotable at the operator's priority, and synced grants count.
#[test]
fn a_tls_group_counts_synced_grants_and_its_replicas_are_promotable() {
    if !tls::supported() {
        eprintln!("skipped: the server binary has no TLS");
        return;
    }
    let certificates = tls::certificates();
    let nameless = [
        "--tls-cert-file",
        certificates.nameless_cert.to_str().expect("a path"),
        "--tls-key-file",
        certificates.nameless_key.to_str().expect("a path"),
    ];
    let master = Server::tls(&[], &nameless);
    let replicas = [Server::tls(&[], &[]), Server::tls(&[], &nameless)];
    for replica in &replicas {
        replica.replicate(&master);
    }
    let mut m = master.client();
    let mut ids: Vec<String> = replicas
        .iter()
        .map(|replica| format!("127.0.0.1:{}", replica.port))
        .collect();
    ids.sort();
    wait_until("both replicas join the set", || {
        let members = info_field(&mut m, "lock", "lock_insync_members").unwrap_or_default();
        let mut members: Vec<&str> = members.split(',').collect();
        members.sort();
        members == ids
    });
    acquire_counted(&mut m, "job", "a", 60_000);
    for replica in &replicas {
        let mut con = replica.client();
        assert_eq!(
            info_field(&mut con, "lock", "lock_insync_said").as_deref(),
            Some("ok")
        );
        wait_until("the replica is promotable", || {
            info_field(&mut con, "lock", "lock_insync_promotable").as_deref() == Some("1")
        });
    }
}
