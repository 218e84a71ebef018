"""leasehold.Lock as a drop-in for redis-py's Lock, on a real server: the drop-in path, the
contended path with waits longer than the socket timeout and with redis-py's retries, the lost
reply, the watchdog, and the read-write lock and semaphore."""

import threading
import time

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import LockError, LockNotOwnedError
from redis.retry import Retry

import leasehold
from conftest import in_threads, wait_until, waiters

CLIENTS = {
    "from_url": lambda server: redis.Redis.from_url(server.url),
    "host_port_with_retries": lambda server: redis.Redis(
        host="127.0.0.1", port=server.port, retry=Retry(ExponentialBackoff(), 3)),
    "resp3": lambda server: redis.Redis.from_url(server.url, protocol=3),
    "decoded": lambda server: redis.Redis.from_url(server.url, decode_responses=True),
}


@pytest.fixture(params=sorted(CLIENTS))
def r(request, server):
    client = CLIENTS[request.param](server)
    yield client
    client.close()


def test_drop_in_through_r_lock(r, name, admin):
    with r.lock(name, timeout=10, lock_class=leasehold.Lock) as lock:
        assert isinstance(lock, leasehold.Lock)
        assert isinstance(lock.fencing_token, int)
        assert lock.owned() and lock.locked()
        assert admin.execute_command("LOCK.FENCE", name) == lock.fencing_token
        assert lock.extend(5) is True
        assert 14_000 < admin.pttl(name) <= 15_000
        assert lock.extend(3, replace_ttl=True) is True
        assert admin.pttl(name) <= 3_000
        assert lock.reacquire() is True
        assert admin.pttl(name) > 9_000
    assert not lock.locked() and lock.fencing_token is None


@pytest.mark.every_redis_py
def test_a_second_lock_waits_longer_than_the_socket_timeout(server, name):
    # redis-py 8 times sockets out after 5 s by default; the wait must not be cut short.
    holder = redis.Redis(port=server.port).lock(
        name, timeout=30, lock_class=leasehold.Lock, thread_local=False)
    assert holder.acquire()
    waiter_client = redis.Redis(port=server.port, socket_timeout=0.5)
    waiter = waiter_client.lock(name, timeout=30, blocking_timeout=5, lock_class=leasehold.Lock)
    releaser = threading.Timer(1.5, holder.release)
    releaser.start()
    started = time.monotonic()
    assert waiter.acquire()
    assert 1.4 < time.monotonic() - started < 3
    assert waiter.fencing_token > 0 and waiter.owned()
    waiter.release()


@pytest.mark.every_redis_py
def test_a_busy_lock_times_out_once_without_repeating_the_wait(server, name, admin):
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    retrying = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=0.3,
                           retry=Retry(ExponentialBackoff(), 5))
    before = admin.info("commandstats").get("cmdstat_lock.acquire", {}).get("calls", 0)
    started = time.monotonic()
    assert not leasehold.Lock(retrying, name, timeout=30, blocking_timeout=1).acquire()
    assert 0.9 < time.monotonic() - started < 2.5
    calls = admin.info("commandstats")["cmdstat_lock.acquire"]["calls"] - before
    assert calls <= 2, f"the wait was sent {calls} times"
    holder.release()


@pytest.mark.every_redis_py
def test_waiters_are_served_in_arrival_order(server, name, admin):
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    order = []

    def wait(n):
        lock = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30, blocking_timeout=10)
        assert lock.acquire()
        order.append(n)
        lock.release()

    threads = []
    for n in range(3):
        threads.append(threading.Thread(target=wait, args=(n,)))
        threads[-1].start()
        wait_until(lambda: waiters(admin, name) == n + 1)
    holder.release()
    for thread in threads:
        thread.join()
    assert order == [0, 1, 2]


@pytest.mark.every_redis_py
def test_a_lost_reply_is_recovered_and_the_lock_is_held_knowingly(server, proxy, name, admin):
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    through_proxy = redis.Redis(port=proxy.port)
    waiter = leasehold.Lock(through_proxy, name, timeout=30, blocking_timeout=1.0,
                            thread_local=False)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("got", waiter.acquire()))
    thread.start()
    wait_until(lambda: waiters(admin, name) == 1)
    proxy.stall_last_connection()  # the wait's own connection: its reply will be lost
    holder.release()
    wait_until(lambda: admin.execute_command("LOCK.INFO", name) is not None)
    thread.join()
    # The server granted it; the client's socket timed out first, then asked again.
    assert outcome["got"] is True
    assert waiter.owned()
    assert admin.execute_command("LOCK.FENCE", name) == waiter.fencing_token
    waiter.release()


def test_releasing_after_the_lease_ran_out(r, name):
    lock = r.lock(name, timeout=0.1, lock_class=leasehold.Lock)
    assert lock.acquire()
    time.sleep(0.2)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    with pytest.raises(LockError):
        lock.release()
    with leasehold.Lock(r, name, timeout=0.1, raise_on_release_error=False):
        time.sleep(0.2)  # exits without raising


def test_non_blocking_acquire_and_explicit_tokens(r, name):
    first = leasehold.Lock(r, name, timeout=10)
    assert first.acquire(token="host-a:1")
    assert not leasehold.Lock(r, name, timeout=10).acquire(blocking=False)
    again = leasehold.Lock(r, name, timeout=10)
    assert again.acquire(blocking=False, token="host-a:1"), "the same owner holds it"
    assert again.fencing_token == first.fencing_token
    first.release()


def test_the_watchdog_keeps_the_lock_and_tells_when_it_is_lost(server, name, admin):
    lock = leasehold.Lock(redis.Redis(port=server.port), name, timeout=0.3, watchdog=True)
    assert lock.acquire()
    time.sleep(1.5)
    assert lock.owned() and not lock.lost.is_set()
    admin.delete(name)
    assert lock.lost.wait(0.5), "lost within a renewal period"
    time.sleep(0.5)
    assert admin.exists(name) == 0, "never taken back"
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_no_timeout_means_a_renewed_default_lease(server, name, admin):
    lock = leasehold.Lock(redis.Redis(port=server.port), name)
    assert lock.acquire()
    assert 29_000 < admin.pttl(name) <= 30_000
    lock.release()
    assert admin.exists(name) == 0


def test_tokens_are_per_thread(server, name):
    lock = leasehold.Lock(redis.Redis(port=server.port), name, timeout=10)
    assert lock.acquire()
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(token=lock.local.token, owned=lock.owned()))
    thread.start()
    thread.join()
    assert seen == {"token": None, "owned": False}
    lock.release()


def test_read_write_lock_and_semaphore(server, name):
    r = redis.Redis(port=server.port)
    first, second = leasehold.ReadWriteLock(r, name, timeout=10), leasehold.ReadWriteLock(r, name, timeout=10)
    assert first.read.acquire(blocking=False) and second.read.acquire(blocking=False)
    assert second.read.fencing_token > first.read.fencing_token
    assert not first.write.acquire(blocking=False)
    first.read.release()
    second.read.release()
    assert first.write.acquire(blocking=False)
    first.write.release()

    permits = [leasehold.Semaphore(r, name + ":pool", 2, timeout=10, thread_local=False)
               for _ in range(3)]
    assert permits[0].acquire(blocking=False) and permits[1].acquire(blocking=False)
    assert not permits[2].acquire(blocking=False)
    threading.Timer(0.3, permits[0].release).start()
    assert permits[2].acquire(blocking_timeout=5)
    with pytest.raises(redis.ResponseError, match="differs from the lock's 2"):
        leasehold.Semaphore(r, name + ":pool", 3, timeout=10).acquire(blocking=False)


def test_threads_sharing_one_lock_take_turns(server, name):
    r = redis.Redis(port=server.port)
    lock = r.lock(name, timeout=10, lock_class=leasehold.Lock)
    inside, grants, failures = [0], [], []
    guard = threading.Lock()

    def loop():
        try:
            for _ in range(5):
                with lock:
                    with guard:
                        inside[0] += 1
                        assert inside[0] == 1, "two inside at once"
                        grants.append(lock.fencing_token)
                    time.sleep(0.002)
                    with guard:
                        inside[0] -= 1
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)

    in_threads(loop, [()] * 8)
    assert failures == []
    assert len(grants) == 40
    assert grants == sorted(grants) and len(set(grants)) == 40, "in grant order"
