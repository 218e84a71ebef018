use redis::{RedisError, Value};

use super::*;
use crate::sync::{released_by_server, renewed_by_server};

fn error(text: &str) -> RedisError {
    let reply = format!("-{text}\r\n");
    match redis::parse_redis_value(reply.as_bytes()).expect("an error reply") {
        Value::ServerError(error) => error.into(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refused_batch_words_each_made_write_as_the_server_words_a_refused_sync_write() {
    let refusal = error(
        "NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the writes before it \
         do not count: release the grants they made",
    );
    let released = refused(&refusal, Given::Released);
    assert!(released_by_server(&released), "{released:?}");
    assert_eq!(
        released.to_string(),
        refused(&refusal, Given::Released).to_string()
    );
    assert!(
        released.to_string().contains(
            "not every in-sync replica acknowledged within 1000 ms; the grant was released"
        ),
        "{released}"
    );
    let renewal = refused(&refusal, Given::Kept(Undo::renewal().kept));
    assert!(renewed_by_server(&renewal), "{renewal:?}");
    let releasing = refused(&refusal, Given::Releasing);
    assert!(!released_by_server(&releasing) && !renewed_by_server(&releasing));
    let demoted = refused(
        &error("UNBLOCKED force unblock from blocking operation"),
        Given::Released,
    );
    assert!(
        demoted
            .to_string()
            .contains("this server is no longer a master"),
        "{demoted}"
    );
}

#[test]
fn a_reply_made_something_unless_null_an_error_or_zero() {
    assert!(made(&Value::Int(7)));
    assert!(made(&Value::Array(vec![Value::Int(1), Value::Int(2)])));
    assert!(!made(&Value::Nil));
    assert!(!made(&Value::Int(0)));
    assert!(!made(&Value::ServerError(
        match Value::ServerError(error_value()) {
            Value::ServerError(e) => e,
            _ => unreachable!(),
        }
    )));
}

fn error_value() -> redis::ServerError {
    match redis::parse_redis_value(b"-ERR no such session\r\n").expect("an error reply") {
        Value::ServerError(error) => error,
        other => panic!("{other:?}"),
    }
}

#[test]
fn at_most_two_senders_take_the_longest_waiting_first_until_none_waits() {
    let queue = Queue::default();
    let write = |key: &str| {
        let mut command = redis::cmd("LOCK.ACQUIRE");
        command.arg(key);
        command
    };
    let timeout = Duration::from_secs(1);
    let push = |key: &str| queue.push(key, write(key), None, Undo::renewal(), timeout);
    let (a, _ra, start) = push("a");
    assert!(start, "the first write starts a sender");
    let (_, _rb, start) = push("b");
    assert!(start, "and the second a second one");
    let (c, _rc, start) = push("c");
    assert!(!start, "two run already");
    assert!(queue.withdraw(a));
    assert!(!queue.withdraw(a), "once");
    let taken = queue.take();
    let keys: Vec<&str> = taken.iter().map(|write| write.write().key).collect();
    assert_eq!(keys, ["b", "c"]);
    assert!(!queue.withdraw(c), "a batch took it");
    for n in 0..=MOST {
        queue.push("d", write(&n.to_string()), None, Undo::renewal(), timeout);
    }
    assert_eq!(queue.take().len(), MOST, "a batch's most");
    assert_eq!(queue.take().len(), 1);
    assert!(queue.take().is_empty(), "none waits: this sender stops");
    let (_, _rd, start) = queue.push("e", write("e"), None, Undo::renewal(), timeout);
    assert!(start, "one runs: room for another");
    assert_eq!(queue.take().len(), 1);
    assert!(
        queue.take().is_empty() && queue.take().is_empty(),
        "both stop"
    );
    let (_, _re, start) = queue.push("f", write("f"), None, Undo::renewal(), timeout);
    assert!(start, "none runs: a new one");
}

#[test]
fn a_caller_that_left_has_its_new_holding_released() {
    let queue = Queue::default();
    let mut release = redis::cmd("LOCK.RELEASE");
    release.arg("a").arg("owner");
    let undo = Undo::grant(release, true);
    let (_, receiver, _) = queue.push("a", redis::cmd("LOCK.ACQUIRE"), None, undo, Duration::ZERO);
    drop(receiver);
    let write = queue.take().pop().expect("queued");
    assert!(write.answer(Ok((Value::Int(9), Instant::now()))).is_some());
}
