//! The watchdog example (the Rust client) against a real server: every watched job finishes
//! with all its writes accepted, and the frozen worker's late write is rejected.

mod common;

#[allow(dead_code)] // the example's `main` is not called here
#[path = "../examples/watchdog.rs"]
mod watchdog;

use common::Server;

#[tokio::test(flavor = "multi_thread")]
async fn watched_jobs_finish_and_the_frozen_worker_is_fenced_off() {
    let server = Server::start(&[]);
    let report = watchdog::run(&server.url(), 4).await.expect("run");
    assert_eq!(
        report,
        watchdog::Report {
            jobs: 3,
            stale_writes_rejected: 1
        }
    );
}
