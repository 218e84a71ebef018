//! The flash-sale example against a real server: no oversell, and the late writes of workers
//! whose lease ran out are rejected by their stale fencing tokens.

mod common;

#[allow(dead_code)] // the example's `main` is not called here
#[path = "../examples/flash_sale.rs"]
mod flash_sale;

use common::Server;

#[test]
fn concurrent_workers_never_oversell() {
    let server = Server::start(&[]);
    let report = flash_sale::run(&server.url(), 16, 150).expect("sale");
    assert_eq!(report.sold, 150, "every item sold exactly once: {report:?}");
    assert_eq!(report.left, 0);
    assert!(
        report.stale_writes_rejected >= 1,
        "the pausing workers were fenced off: {report:?}"
    );
    assert!(
        report.lock_busy > 0,
        "the workers really contended: {report:?}"
    );
}
