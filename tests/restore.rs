//! Locks through `DUMP` and `RESTORE`, and bytes from outside: a `RESTORE` payload anyone
//! allowed to send one can craft, and a damaged RDB file. Every bad payload is answered with an
//! error and changes nothing, the server keeps serving, and no payload moves the fencing counter
//! further ahead of the clock than `lock.max-clock-skew-ms` (the model: Redis's own
//! `tests/integration/corrupt-dump-fuzzer.tcl`).

mod common;

use std::time::Instant;

use common::{
    Server, acquire, call, dump, error, info_field, lock_info, now_ms, restore, wait_until,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::{Connection, Value};

/// The most tokens a server issues per ms of its clock, and how far its counter may run ahead
/// of it (the module's `fence::TOKENS_PER_MS` and `fence::RESERVE`).
const TOKENS_PER_MS: i64 = 1_000;
const RESERVE: i64 = 1_000_000_000;

/// The default `lock.max-clock-skew-ms`.
const SKEW_MS: i64 = 10_000;

/// The largest token a `RESTORE` may bring at unix time `now` with a clock skew of `skew_ms`:
/// what a server whose clock is that far ahead could have issued.
fn restore_limit(now: i64, skew_ms: i64) -> i64 {
    (now + skew_ms + 1) * TOKENS_PER_MS + RESERVE - 1
}

fn last_token(con: &mut Connection) -> i64 {
    info_field(con, "lock", "lock_last_token")
        .and_then(|token| token.parse().ok())
        .expect("INFO lock")
}

/// Recomputes a `DUMP` payload's CRC64 (its last 8 bytes) after it was changed, so that Redis's
/// checksum passes and the module's loader sees the change.
fn fix_crc(payload: &mut [u8]) {
    let body = payload.len().saturating_sub(8);
    let crc = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(&payload[..body]);
    payload[body..].copy_from_slice(&crc.to_le_bytes());
}

/// `key`'s `DUMP` payload with its token `token` replaced by `forged`, the CRC64 fixed.
fn payload_with_token(con: &mut Connection, key: &str, token: i64, forged: i64) -> Vec<u8> {
    let mut payload = dump(con, key);
    // The token is saved as a 64-bit length: 0x81 then 8 big-endian bytes.
    let encoded = [&[0x81][..], &token.to_be_bytes()].concat();
    let at = payload
        .windows(encoded.len())
        .position(|window| window == encoded.as_slice())
        .expect("the token in the payload");
    payload[at + 1..at + 9].copy_from_slice(&forged.to_be_bytes());
    fix_crc(&mut payload);
    payload
}

#[test]
fn dump_and_restore_carry_the_lock_and_raise_the_counter_of_the_target() {
    let source = Server::start(&[]);
    let target = Server::start(&[]);
    let mut src = source.client();
    let mut dst = target.client();
    acquire(&mut src, "k", "alice", 60_000, &[]).expect("granted");
    acquire(&mut src, "k", "alice", 60_000, &["REENTRANT"]).expect("re-entered");
    // The target's counter starts lower: the source issued more tokens meanwhile.
    for _ in 0..5 {
        acquire(&mut src, "k", "alice", 60_000, &[]);
    }
    let payload = dump(&mut src, "k");
    let held = lock_info(&mut src, "k").expect("held");
    for con in [&mut src, &mut dst] {
        assert_eq!(restore(con, "k2", 50_000, &payload).as_deref(), Ok("OK"));
        let copy = lock_info(con, "k2").expect("restored");
        assert_eq!((&copy.0, copy.1, copy.3), (&held.0, held.1, held.3));
        assert!(copy.2 <= 50_000 && copy.2 > 40_000);
    }
    let next = acquire(&mut dst, "other", "bob", 1_000, &[]).expect("granted");
    assert!(next > held.1, "a restored lock raises the target's counter");
}

#[test]
fn an_unknown_encoding_version_refuses_to_load() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    let mut payload = dump(&mut con, "k");
    // A module value starts with its type byte, then the 64-bit module type id (length
    // prefix 0x81, big-endian) whose low 10 bits are the encoding version.
    assert_eq!(payload[1], 0x81, "64-bit module id");
    assert_eq!(
        payload[8] & 0x03,
        0,
        "encoding version 2 lives in the last byte"
    );
    assert_eq!(payload[9], 2);
    payload[9] = 3;
    fix_crc(&mut payload);
    let refused = restore(&mut con, "k2", 0, &payload).expect_err("version 3 is unknown");
    assert!(refused.to_string().contains("Bad data format"), "{refused}");
    assert_eq!(call(&mut con, &["EXISTS", "k2"]), Value::Int(0));
    assert_eq!(
        call(&mut con, &["PING"]),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn a_restored_lock_raises_the_counter_above_its_token() {
    let source = Server::start(&[]);
    let target = Server::start(&[]);
    let mut src = source.client();
    let mut dst = target.client();
    let token = acquire(&mut src, "k", "alice", 60_000, &[]).expect("granted");
    // From a server whose clock is 1.5 s ahead: above anything the target may issue yet.
    let ahead = token + 1_500_000;
    let payload = payload_with_token(&mut src, "k", token, ahead);
    assert_eq!(restore(&mut dst, "k", 0, &payload).as_deref(), Ok("OK"));
    assert_eq!(lock_info(&mut dst, "k").map(|info| info.1), Some(ahead));

    // The target issues nothing above its own clock's ceiling: it asks to retry, changing
    // nothing, and a waiting client is granted once the clock has caught up.
    let refused = error(&mut dst, &["LOCK.ACQUIRE", "other", "bob", "1000"]);
    let retry_in_ms: i64 = refused
        .strip_prefix("TRYAGAIN fencing tokens are ahead of this server's clock; retry in ")
        .and_then(|rest| rest.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{refused}"));
    assert!((1..=1_600).contains(&retry_in_ms), "{refused}");
    assert_eq!(call(&mut dst, &["EXISTS", "other"]), Value::Int(0));
    let asked = Instant::now();
    let next = acquire(&mut dst, "other", "bob", 1_000, &["WAIT", "5000"]).expect("granted");
    assert!(next > ahead, "{next} after a restored {ahead}");
    assert!(asked.elapsed().as_millis() + 50 >= u128::try_from(retry_in_ms).unwrap_or(0));
}

#[test]
fn a_lock_restored_without_a_ttl() {
    let server = Server::start(&[]);
    let mut con = server.client();
    // An exclusive lock's lease is its key's expiry: restored with none, as after `PERSIST`,
    // it is held until its owner releases it, or renews it, which gives it a lease again.
    acquire(&mut con, "exclusive", "alice", 60_000, &[]).expect("exclusive");
    let payload = dump(&mut con, "exclusive");
    assert_eq!(restore(&mut con, "copy", 0, &payload).as_deref(), Ok("OK"));
    assert_eq!(call(&mut con, &["PTTL", "copy"]), Value::Int(-1));
    assert_eq!(lock_info(&mut con, "copy").map(|info| info.2), Some(-1));
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "copy", "alice", "5000"]),
        Value::Int(1)
    );
    let ttl = lock_info(&mut con, "copy").map_or(0, |info| info.2);
    assert!((1..=5_000).contains(&ttl), "{ttl}");

    // Shared holders keep their own leases; the lock ends with the last of them.
    acquire(&mut con, "shared", "r1", 300, &["SHARED"]).expect("r1");
    acquire(&mut con, "shared", "r2", 600, &["SHARED"]).expect("r2");
    let payload = dump(&mut con, "shared");
    assert_eq!(
        restore(&mut con, "readers", 0, &payload).as_deref(),
        Ok("OK")
    );
    assert_eq!(call(&mut con, &["PTTL", "readers"]), Value::Int(-1));
    wait_until("the restored shared lock ends with its leases", || {
        call(&mut con, &["EXISTS", "readers"]) == Value::Int(0)
    });
}

#[test]
fn a_restored_token_far_ahead_of_the_clock_is_refused() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    let before = last_token(&mut con);
    let far = restore_limit(now_ms(), SKEW_MS) + 60_000 * TOKENS_PER_MS;
    for forged in [far, (1 << 53) - 1, 1 << 53, i64::MAX] {
        let payload = payload_with_token(&mut con, "k", token, forged);
        let refused = restore(&mut con, "k2", 0, &payload).expect_err("too far ahead");
        assert!(refused.to_string().contains("Bad data format"), "{refused}");
        assert_eq!(call(&mut con, &["EXISTS", "k2"]), Value::Int(0));
        assert_eq!(last_token(&mut con), before, "the counter did not move");
    }
    assert!(
        server.log().contains("raise lock.max-clock-skew-ms"),
        "the log says why and what to do:\n{}",
        server.log()
    );
    let next = acquire(&mut con, "next", "bob", 1_000, &[]).expect("tokens are not exhausted");
    assert!(next > token);

    // The operator whose source server's clock really is that far ahead raises the setting.
    call(
        &mut con,
        &["CONFIG", "SET", "lock.max-clock-skew-ms", "86400000"],
    );
    let payload = payload_with_token(&mut con, "k", token, far);
    assert_eq!(restore(&mut con, "k2", 0, &payload).as_deref(), Ok("OK"));
    assert_eq!(last_token(&mut con), far);
}

#[test]
fn the_servers_own_rdb_and_its_replicas_are_not_bounded() {
    let mut master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut con = master.client();
    let token = acquire(&mut con, "k", "alice", 600_000, &[]).expect("granted");
    // A token an hour ahead of every clock here, accepted under the master's setting of now.
    call(
        &mut con,
        &["CONFIG", "SET", "lock.max-clock-skew-ms", "86400000"],
    );
    let ahead = restore_limit(now_ms(), 3_600_000);
    let payload = payload_with_token(&mut con, "k", token, ahead);
    assert_eq!(
        restore(&mut con, "k2", 600_000, &payload).as_deref(),
        Ok("OK")
    );

    // The replica, with the default setting, takes what its master accepted.
    common::sync_replicas(&mut con);
    let mut replica_con = replica.client();
    assert_eq!(
        lock_info(&mut replica_con, "k2").map(|info| info.1),
        Some(ahead)
    );
    assert_eq!(last_token(&mut replica_con), ahead);

    // The master restarts with the default setting and loads its own RDB whole, as it does
    // on `DEBUG RELOAD`.
    master.shutdown("SAVE");
    master.restart();
    let mut con = master.client();
    let skew = call(&mut con, &["CONFIG", "GET", "lock.max-clock-skew-ms"]);
    assert_eq!(
        skew,
        Value::Array(vec![
            Value::BulkString(b"lock.max-clock-skew-ms".to_vec()),
            Value::BulkString(SKEW_MS.to_string().into_bytes()),
        ])
    );
    for _ in 0..2 {
        assert_eq!(lock_info(&mut con, "k2").map(|info| info.1), Some(ahead));
        assert_eq!(last_token(&mut con), ahead);
        call(&mut con, &["DEBUG", "RELOAD"]);
    }
}

/// One lock of each kind, as `DUMP` payloads: exclusive, re-entered, shared with three
/// holders (one with a 256-byte owner), and a semaphore with two of three permits taken.
fn payloads(con: &mut Connection) -> Vec<Vec<u8>> {
    let long = "o".repeat(256);
    acquire(con, "exclusive", "alice", 600_000, &[]).expect("exclusive");
    for _ in 0..3 {
        acquire(con, "reentrant", "alice", 600_000, &["REENTRANT"]).expect("reentrant");
    }
    for owner in ["r1", "r2", &long] {
        acquire(con, "shared", owner, 600_000, &["SHARED"]).expect("shared");
    }
    for owner in ["p1", "p2"] {
        acquire(con, "semaphore", owner, 600_000, &["SHARED", "LIMIT", "3"]).expect("permit");
    }
    ["exclusive", "reentrant", "shared", "semaphore"]
        .iter()
        .map(|key| dump(con, key))
        .collect()
}

/// `payload` changed at random: bytes flipped, inserted, deleted, garbage appended, or cut
/// short, one to three times, within the value (never the RDB version and CRC64 after it,
/// which are recomputed).
fn mutate(payload: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let footer = payload.len() - 10;
    let (mut body, tail) = (payload[..footer].to_vec(), &payload[footer..]);
    for _ in 0..rng.random_range(1..=3) {
        // The module's data starts after the type byte and the 9-byte module id.
        let at = rng.random_range(10.min(body.len())..=body.len());
        match rng.random_range(0..5) {
            0 if at < body.len() => body[at] ^= 1 << rng.random_range(0..8),
            1 if at < body.len() => drop(body.remove(at)),
            2 => body.insert(at, rng.random()),
            3 => body.extend((0..rng.random_range(1..16)).map(|_| rng.random::<u8>())),
            _ => body.truncate(at),
        }
    }
    let mut mutated = [&body[..], tail].concat();
    fix_crc(&mut mutated);
    mutated
}

/// `payload` cut at every offset of its value, the footer kept.
fn truncations(payload: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let footer = payload.len() - 10;
    (0..footer).map(move |end| {
        let mut cut = [&payload[..end], &payload[footer..]].concat();
        fix_crc(&mut cut);
        cut
    })
}

/// Restores `payload` as `key`, then runs every lock command on the key (restored or not):
/// each must be answered, errors included. Returns whether it restored.
fn restore_and_use(con: &mut Connection, key: &str, payload: &[u8]) -> bool {
    let commands: [&[&str]; 13] = [
        &["LOCK.INFO", key],
        &["LOCK.FENCE", key],
        &["LOCK.FENCE", key, "r1"],
        &["DEBUG", "DIGEST-VALUE", key],
        &["MEMORY", "USAGE", key],
        &["DUMP", key],
        &["LOCK.RENEW", key, "alice", "60000"],
        &["LOCK.ACQUIRE", key, "p9", "60000", "SHARED", "LIMIT", "3"],
        &["LOCK.ACQUIRE", key, "alice", "60000", "REENTRANT"],
        &["LOCK.RELEASE", key, "r2"],
        &["LOCK.MRENEW", "2", key, "other", "alice", "60000"],
        &["LOCK.RELEASE", key, "alice"],
        &["DEL", key],
    ];
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("RESTORE").arg(key).arg(0).arg(payload);
    for command in commands {
        pipe.cmd(command[0]).arg(&command[1..]);
    }
    let replies: Vec<Value> = pipe
        .query(con)
        .unwrap_or_else(|e| panic!("the server stopped answering: {e}"));
    replies.first() == Some(&Value::Okay)
}

#[test]
fn mutated_restore_payloads_are_answered_and_the_server_keeps_serving() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let originals = payloads(&mut con);
    let seed = std::env::var("LEASEHOLD_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (LEASEHOLD_SEED={seed} repeats this run)");
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut cases, mut restored) = (0, 0);
    let cuts = originals.iter().flat_map(|payload| truncations(payload));
    let random = (0..3_000).map(|i| mutate(&originals[i % originals.len()], &mut rng));
    for payload in cuts.chain(random) {
        restored += usize::from(restore_and_use(&mut con, "victim", &payload));
        cases += 1;
        if cases % 500 == 0 {
            let limit = restore_limit(now_ms(), SKEW_MS);
            assert!(last_token(&mut con) <= limit, "the counter within the skew");
        }
    }
    eprintln!("{cases} payloads, {restored} restored");
    assert!(cases > 3_000);
    // Every original still works, the counter still issues tokens, and nothing broke.
    for (i, payload) in originals.iter().enumerate() {
        let key = format!("copy{i}");
        assert_eq!(
            common::restore(&mut con, &key, 0, payload).as_deref(),
            Ok("OK")
        );
    }
    let granted = acquire(&mut con, "after", "bob", 1_000, &["WAIT", "20000"]);
    assert!(granted.is_some(), "tokens still issued");
    let log = server.log();
    assert!(
        !log.contains("Guru Meditation") && !log.contains("panicked"),
        "{log}"
    );
}

#[test]
fn a_damaged_rdb_file_stops_the_start_with_a_clear_log_line() {
    let mut server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "exclusive", "alice-the-owner", 600_000, &[]).expect("exclusive");
    acquire(&mut con, "shared", "reader", 600_000, &["SHARED"]).expect("shared");
    call(&mut con, &["SAVE"]);
    server.shutdown("NOSAVE");
    let path = server.dir().join("dump.rdb");
    let rdb = std::fs::read(&path).expect("dump.rdb");
    let owner = rdb
        .windows(15)
        .position(|window| window == b"alice-the-owner")
        .expect("the owner in the RDB");

    // Cut inside the lock's value: the module sees a short read.
    std::fs::write(&path, &rdb[..owner + 15 + 3]).expect("cut");
    let log = server.restart_refused();
    assert!(
        log.contains("a lock could not be loaded: the data ends early"),
        "{log}"
    );
    assert!(
        !log.contains("Guru Meditation") && !log.contains("panicked"),
        "{log}"
    );

    // A hold count of 0, which the module never writes: refused for what it means.
    let mut zero_holds = rdb.clone();
    // After the owner: the token (the unsigned opcode 2, then 0x81 and 8 bytes), then the
    // hold count (opcode 2, then 1 as a 6-bit length).
    let holds_at = owner + 15 + 10 + 1;
    assert_eq!(zero_holds[holds_at - 1..=holds_at], [2, 1], "one hold");
    zero_holds[holds_at] = 0;
    std::fs::write(&path, &zero_holds).expect("zero holds");
    let log = server.restart_refused();
    assert!(
        log.contains("an owner, fencing token, hold count or proclaimed value out of range"),
        "{log}"
    );
    assert!(
        !log.contains("Guru Meditation") && !log.contains("panicked"),
        "{log}"
    );

    // The undamaged file loads.
    std::fs::write(&path, &rdb).expect("restore the RDB");
    server.restart();
    let mut con = server.client();
    assert_eq!(
        common::holder(&mut con, "exclusive").as_deref(),
        Some("alice-the-owner")
    );
    wait_until("the shared lock loaded", || {
        common::shared_info(&mut con, "shared").is_some()
    });
}
