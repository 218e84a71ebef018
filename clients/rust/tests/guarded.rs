//! A holding's guarded command (`Guard::guard`, `LOCK.GUARD` with the holding's owner and
//! fencing token) and fenced commands (`Guard::fenced`, `Client::fenced`, `LOCK.FENCED`) on a
//! real server: the holder's command runs; a holding whose lease ended, once another owner took
//! the lock — or the same owner again, with a new token — is refused with `Error::NotHeld` and
//! changes nothing; a smaller token is refused with `Error::Stale` after a larger one wrote.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{Server, call};
use leasehold_client::{Client, Error, Lock, Sync};
use redis::Value;

const TTL: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(200);

async fn client(server: &Server) -> Client {
    Client::open(&server.url()).await.expect("connect")
}

fn decrby(key: &str, by: i64) -> redis::Cmd {
    let mut command = redis::cmd("DECRBY");
    command.arg(key).arg(by);
    command
}

fn stock(con: &mut redis::Connection) -> Value {
    call(con, &["GET", "stock:42"])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_holder_runs_its_command_and_a_lost_holding_is_refused_with_nothing_changed() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    call(&mut con, &["SET", "stock:42", "10"]);
    let old = Lock::new(&client, "order:42")
        .try_acquire(SHORT)
        .await
        .expect("acquire")
        .expect("free");
    let left: i64 = old.guard(&decrby("stock:42", 1)).await.expect("guard");
    assert_eq!(left, 9);
    let read: String = old
        .guard(redis::cmd("GET").arg("stock:42"))
        .await
        .expect("a read");
    assert_eq!(read, "9", "the command's own reply");
    tokio::time::sleep(SHORT + Duration::from_millis(100)).await;
    let new = Lock::new(&client, "order:42")
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("the lease ended");
    let refused = old.guard::<i64>(&decrby("stock:42", 1)).await;
    assert!(
        matches!(&refused, Err(Error::NotHeld { message })
            if message.starts_with("NOTHELD the lock is held by another owner")),
        "{refused:?}"
    );
    assert_eq!(stock(&mut con), Value::BulkString(b"9".to_vec()));
    assert_eq!(
        new.guard::<i64>(&decrby("stock:42", 2))
            .await
            .expect("guard"),
        7
    );
    assert!(new.release().await.expect("release"));
    let refused = old.guard::<i64>(&decrby("stock:42", 1)).await;
    assert!(
        matches!(&refused, Err(Error::NotHeld { message }) if message.contains("the lock is free")),
        "{refused:?}"
    );
    assert_eq!(stock(&mut con), Value::BulkString(b"7".to_vec()));
    drop(old);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holding_lost_and_taken_again_by_the_same_owner_runs_nothing() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    call(&mut con, &["SET", "stock:42", "10"]);
    let lock = Lock::new(&client, "order:42").with_owner("host-a");
    let old = lock
        .try_acquire(SHORT)
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(SHORT + Duration::from_millis(100)).await;
    let again = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    assert!(again.token() > old.token());
    let refused = old.guard::<i64>(&decrby("stock:42", 1)).await;
    let expected = format!("with token {}, not {}", again.token(), old.token());
    assert!(
        matches!(&refused, Err(Error::NotHeld { message }) if message.contains(&expected)),
        "{refused:?}"
    );
    assert_eq!(stock(&mut con), Value::BulkString(b"10".to_vec()));
    assert_eq!(
        again
            .guard::<i64>(&decrby("stock:42", 1))
            .await
            .expect("guard"),
        9
    );
    // Both guards have the same owner: the old one's release would end the new holding.
    std::mem::forget(old);
    assert!(again.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_smaller_token_is_refused_after_a_larger_one_wrote_through_the_fence() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    call(&mut con, &["SET", "stock:42", "10"]);
    let first = Lock::new(&client, "order:42")
        .try_acquire(SHORT)
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(SHORT + Duration::from_millis(100)).await;
    let second = Lock::new(&client, "order:42")
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("the lease ended");
    let fence = "fence:stock:42";
    let left: i64 = second
        .fenced(fence, &decrby("stock:42", 1))
        .await
        .expect("fenced");
    assert_eq!(left, 9);
    let refused = first.fenced::<i64>(fence, &decrby("stock:42", 1)).await;
    assert!(
        matches!(&refused, Err(Error::Stale { token, largest, .. })
            if *token == first.token() && *largest == second.token()),
        "{refused:?}"
    );
    assert_eq!(stock(&mut con), Value::BulkString(b"9".to_vec()));
    // A token from anywhere (another server's lock, Redlock): the same fence.
    let set = redis::cmd("SET").arg("stock:42").arg("100").clone();
    let ok: String = client
        .fenced(fence, second.token() + 5, &set)
        .await
        .expect("a larger token");
    assert_eq!(ok, "OK");
    let off = Sync::off();
    let refused = client
        .fenced_with::<String>(fence, second.token(), &set, &off)
        .await;
    assert!(matches!(refused, Err(Error::Stale { .. })), "{refused:?}");
    assert_eq!(stock(&mut con), Value::BulkString(b"100".to_vec()));
    drop(first);
    assert!(second.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn syncing_off_guards_on_the_shared_connection_and_a_set_cannot_guard() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    call(&mut con, &["SET", "stock:42", "3"]);
    let lock = Lock::new(&client, "order:42").with_sync(Sync::off());
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    let incr = redis::cmd("INCR").arg("stock:42").clone();
    assert_eq!(guard.guard::<i64>(&incr).await.expect("guard"), 4);
    let blocking = guard
        .guard::<Value>(redis::cmd("BLPOP").arg("list").arg(0))
        .await;
    assert!(
        matches!(&blocking, Err(Error::Redis(error)) if error.to_string().contains("cannot be guarded")),
        "the server's own refusal: {blocking:?}"
    );
    assert!(guard.release().await.expect("release"));
    let set = Lock::multi(&client, &["{order}:a", "{order}:b"])
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("free");
    assert!(matches!(
        set.guard::<i64>(&incr).await,
        Err(Error::NotOnSet("guard"))
    ));
    assert_eq!(
        set.fenced::<i64>("{order}:fence", &incr)
            .await
            .expect("a set fences with its largest token"),
        5
    );
    assert!(set.release().await.expect("release"));
}
