//! `LOCK.RAISE key owner token`: only the holder's own token, only upwards, only within what a
//! server with a clock `lock.max-clock-skew-ms` ahead could have issued; replicated and
//! persisted like any token, and the counter follows it.

mod common;

use common::{Server, acquire, call, error, now_ms, promote, shared_info, sync_replicas};
use redis::Value;

const RESERVE: i64 = 1_000_000_000;

fn raise(con: &mut redis::Connection, key: &str, owner: &str, token: i64) -> Value {
    call(con, &["LOCK.RAISE", key, owner, &token.to_string()])
}

#[test]
fn the_holder_raises_its_own_token_and_the_counter_follows() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let own = acquire(&mut con, "k", "a", 60_000, &["NOSYNC"]).expect("granted");
    let higher = own + 500;
    assert_eq!(raise(&mut con, "k", "a", higher), Value::Int(higher));
    assert_eq!(
        call(&mut con, &["LOCK.FENCE", "k", "a"]),
        Value::Int(higher)
    );
    assert_eq!(
        raise(&mut con, "k", "a", own),
        Value::Int(higher),
        "never down"
    );
    assert_eq!(
        raise(&mut con, "k", "b", higher + 1),
        Value::Nil,
        "not the holder"
    );
    assert_eq!(raise(&mut con, "free", "a", higher + 1), Value::Nil);
    let next = acquire(&mut con, "other", "c", 1_000, &["NOSYNC"]).expect("granted");
    assert!(next > higher, "{next} after a raise to {higher}");
    call(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Int(higher));
}

#[test]
fn a_token_out_of_range_is_refused_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let own = acquire(&mut con, "k", "a", 60_000, &["NOSYNC"]).expect("granted");
    let out_of_range = "ERR token out of range";
    // The most a server whose clock is 10 s ahead (the default skew) could have issued.
    let limit = (now_ms() + 10_000 + 1) * 1000 + RESERVE;
    for token in [
        "0",
        "-5",
        "x",
        &(limit + 2_000_000).to_string(),
        &(1_i64 << 53).to_string(),
    ] {
        assert_eq!(
            error(&mut con, &["LOCK.RAISE", "k", "a", token]),
            out_of_range,
            "{token}"
        );
    }
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Int(own));
    assert!(matches!(
        raise(&mut con, "k", "a", limit - 2_000_000),
        Value::Int(_)
    ));
    call(&mut con, &["CONFIG", "SET", "lock.max-clock-skew-ms", "0"]);
    let own_ceiling = (now_ms() + 1) * 1000 + RESERVE;
    assert_eq!(
        error(
            &mut con,
            &[
                "LOCK.RAISE",
                "k",
                "a",
                &(own_ceiling + 2_000_000).to_string()
            ]
        ),
        out_of_range
    );
    assert!(
        error(&mut con, &["LOCK.RAISE", "k", "a"]).starts_with("ERR wrong number of arguments")
    );
    call(&mut con, &["SET", "string", "x"]);
    assert!(error(&mut con, &["LOCK.RAISE", "string", "a", "5"]).starts_with("WRONGTYPE"));
}

#[test]
fn a_raise_ahead_of_this_clock_makes_new_holdings_wait_for_it() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "a", 60_000, &["NOSYNC"]).expect("granted");
    let ahead = (now_ms() + 1_000) * 1000 + RESERVE;
    assert_eq!(raise(&mut con, "k", "a", ahead), Value::Int(ahead));
    assert!(error(&mut con, &["LOCK.ACQUIRE", "new", "b", "1000"]).starts_with("TRYAGAIN"));
    let next = acquire(&mut con, "new", "b", 1_000, &["WAIT", "5000"]).expect("granted");
    assert!(next > ahead);
}

#[test]
fn a_reader_raises_its_own_token() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let a = acquire(&mut con, "rw", "a", 60_000, &["SHARED"]).expect("a");
    let b = acquire(&mut con, "rw", "b", 60_000, &["SHARED"]).expect("b");
    assert_eq!(raise(&mut con, "rw", "a", b + 10), Value::Int(b + 10));
    let info = shared_info(&mut con, "rw").expect("held");
    let owners: Vec<(String, i64)> = info.owners.iter().map(|o| (o.0.clone(), o.1)).collect();
    assert_eq!(
        owners,
        [("b".into(), b), ("a".into(), b + 10)],
        "token order"
    );
    assert_eq!(call(&mut con, &["LOCK.FENCE", "rw"]), Value::Int(b + 10));
    assert!(a < b);
}

#[test]
fn a_raise_replicates_and_a_promoted_replica_continues_above_it() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    let own = acquire(&mut m, "k", "a", 60_000, &["NOSYNC"]).expect("granted");
    acquire(&mut m, "rw", "r", 60_000, &["SHARED"]).expect("granted");
    raise(&mut m, "k", "a", own + 700);
    raise(&mut m, "rw", "r", own + 800);
    sync_replicas(&mut m);
    let mut r = replica.client();
    assert_eq!(
        call(&mut r, &["LOCK.FENCE", "k", "a"]),
        Value::Int(own + 700)
    );
    assert_eq!(
        call(&mut r, &["LOCK.FENCE", "rw", "r"]),
        Value::Int(own + 800)
    );
    assert_eq!(
        call(&mut m, &["DEBUG", "DIGEST-VALUE", "rw"]),
        call(&mut r, &["DEBUG", "DIGEST-VALUE", "rw"])
    );
    promote(&mut r);
    let next = acquire(&mut r, "other", "b", 1_000, &["NOSYNC"]).expect("granted");
    assert!(next > own + 800);
}

#[test]
fn max_clock_skew_is_a_configuration() {
    let server = Server::with_module_args(&["max-clock-skew-ms", "2500"], &[]);
    let mut con = server.client();
    assert_eq!(
        call(&mut con, &["CONFIG", "GET", "lock.max-clock-skew-ms"]),
        Value::Array(vec![
            Value::BulkString(b"lock.max-clock-skew-ms".to_vec()),
            Value::BulkString(b"2500".to_vec())
        ])
    );
    assert!(error(&mut con, &["CONFIG", "SET", "lock.max-clock-skew-ms", "-1"]).starts_with("ERR"));
    assert!(
        error(
            &mut con,
            &["CONFIG", "SET", "lock.max-clock-skew-ms", "86400001"]
        )
        .starts_with("ERR")
    );
    let log = Server::refused(&["max-clock-skew-ms", "-5"]);
    assert!(
        log.contains("lock.max-clock-skew-ms must be 0 to 86400000"),
        "{log}"
    );
}
