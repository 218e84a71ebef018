"""The dedicated connections (``leasehold.configure_pools``), sync and asyncio, on a real master
and replica: counted on the server (``total_connections_received``) over synced grants and
waits, a connection whose reply was lost or whose call was cancelled never reused, a wait
cancelled at any step stopped, and full pools making callers queue within their own budget
without ever holding up a holder."""

import asyncio
import signal
import sys
import threading
import time

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import aclose, fence, in_threads, wait_until, waiters

#: About 25 s of tests: started first (conftest.py).
pytestmark = pytest.mark.long


def connections_received(admin) -> int:
    """Connections the server accepted so far (``admin``'s own is already open)."""
    return int(admin.info("stats")["total_connections_received"])


def handed_over(admin) -> int:
    """Locks the server handed to a client waiting for them."""
    return int(admin.info("lock")["lock_handovers"])


def calls(admin, *commands: str) -> tuple:
    """How many times the server ran each of ``commands`` so far (``INFO commandstats``)."""
    stats = admin.info("commandstats")
    return tuple(int(stats.get(f"cmdstat_{command}", {}).get("calls", 0)) for command in commands)


def blocked_clients(admin) -> int:
    return int(admin.info("clients")["blocked_clients"])


def contend(lock, rounds: int) -> None:
    """Takes ``lock`` ``rounds`` times, each a blocking acquire (``LOCK.ACQUIRE ... WAIT``)."""
    for _ in range(rounds):
        assert lock.acquire(blocking_timeout=30)
        time.sleep(0.002)
        lock.release()


def test_synced_grants_and_waits_reuse_their_connections(replicated, name):
    master, _ = replicated
    admin = redis.Redis(port=master.port)
    r = redis.Redis(port=master.port)
    lock = leasehold.Lock(r, name, timeout=10)
    assert lock.acquire(blocking=False)  # warm-up: the client's own connection, the sync pool's
    lock.release()
    before = connections_received(admin)
    for _ in range(200):
        assert lock.acquire(blocking=False)
        lock.release()
    assert connections_received(admin) - before == 0, "200 synced grants on the connections open"

    shared = leasehold.Lock(r, name + ":contended", timeout=10)
    before, waited = connections_received(admin), handed_over(admin)
    in_threads(contend, [(shared, 25)] * 4)
    opened = connections_received(admin) - before
    # At most one wait connection per worker, and the client's own pool one per thread.
    assert opened <= 8, f"{opened} connections for 100 waits"
    assert handed_over(admin) - waited > 0, "they waited in the server"
    assert r.exists(name + ":contended") == 0


async def test_asyncio_synced_grants_and_waits_reuse_their_connections(replicated, name):
    master, _ = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    lock = leasehold.asyncio.Lock(r, name, timeout=10)
    assert await lock.acquire(blocking=False)
    await lock.release()
    before = connections_received(admin)
    for _ in range(200):
        assert await lock.acquire(blocking=False)
        await lock.release()
    assert connections_received(admin) - before == 0, "200 synced grants on the connections open"

    shared = leasehold.asyncio.Lock(r, name + ":contended", timeout=10)

    async def worker():
        for _ in range(25):
            assert await shared.acquire(blocking_timeout=30)
            await asyncio.sleep(0.002)
            await shared.release()

    before = connections_received(admin)
    await asyncio.gather(*(worker() for _ in range(4)))
    opened = connections_received(admin) - before
    assert opened <= 8, f"{opened} connections for 100 waits"
    await aclose(r)


def test_a_connection_whose_reply_was_lost_is_not_reused(server, proxy, name, admin):
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    waiter = leasehold.Lock(redis.Redis(port=proxy.port), name, timeout=30, blocking_timeout=1.0,
                            thread_local=False)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("got", waiter.acquire()))
    thread.start()
    wait_until(lambda: waiters(admin, name) == 1)
    proxy.stall_last_connection()  # the wait pool's connection: its reply will be lost
    holder.release()
    thread.join()
    assert outcome["got"] is True, "recovered on another connection"
    waiter.release()
    opened = len(proxy.connections)
    # Reusing the stalled connection would lose this reply too; the wait pool dials anew.
    assert waiter.acquire(blocking_timeout=5)
    assert len(proxy.connections) == opened + 1
    assert admin.execute_command("LOCK.FENCE", name) == waiter.fencing_token
    waiter.release()


async def test_a_cancelled_wait_closes_its_connection(server, name, admin):
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    r = redis.asyncio.Redis(port=server.port)
    waiter = leasehold.asyncio.Lock(r, name, timeout=30, blocking_timeout=30)
    waiting = asyncio.ensure_future(waiter.acquire())
    while waiters(admin, name) != 1:
        await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    deadline = time.monotonic() + 10
    while waiters(admin, name) != 0:  # the server saw the connection close
        assert time.monotonic() < deadline, "the cancelled wait's connection stayed open"
        await asyncio.sleep(0.01)
    before = connections_received(admin)
    assert not await waiter.acquire(blocking_timeout=0.2)
    assert connections_received(admin) - before == 1, "a new connection for the next wait"
    holder.release()
    await aclose(r)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.wait_for loses a cancellation "
                    "before Python 3.11 without a trace (CPython gh-86296)")
async def test_a_wait_cancelled_at_any_step_stops(server, name, admin):
    # With a socket timeout redis-py connects and writes under asyncio.wait_for, which loses a
    # cancellation that comes just as the step it awaits completes: cancelled after each number
    # of loop steps in turn, the wait must stop every time.
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    r = redis.asyncio.Redis(port=server.port, socket_timeout=5)
    waiter = leasehold.asyncio.Lock(r, name, timeout=30, blocking_timeout=30)
    went_on = []
    for steps in range(120):
        waiting = asyncio.ensure_future(waiter.acquire())
        for _ in range(steps):
            await asyncio.sleep(0)
        waiting.cancel()
        done, _ = await asyncio.wait({waiting}, timeout=2)
        if not done:
            went_on.append(steps)
            waiting.cancel()
            await asyncio.wait({waiting}, timeout=2)
    assert went_on == [], "cancelled after these numbers of steps, the wait went on"
    wait_until(lambda: waiters(admin, name) == 0)  # the server saw the last one's connection close
    holder.release()
    await aclose(r)


def test_a_full_wait_pool_queues_waiters_within_their_budget_and_never_holds_up_the_holder(
        replicated, name):
    master, _ = replicated
    r = redis.Redis(port=master.port)
    leasehold.configure_pools(r, wait=2, sync=1)
    with pytest.raises(leasehold.LockError):
        leasehold.configure_pools(r, wait=0)
    holder = leasehold.Lock(r, name, timeout=30, thread_local=False)
    assert holder.acquire(blocking=False)
    served = []

    def wait():
        lock = leasehold.Lock(r, name, timeout=30, blocking_timeout=60)
        served.append(lock.acquire())
        lock.release()

    threads = [threading.Thread(target=wait) for _ in range(2)]
    for thread in threads:
        thread.start()
    wait_until(lambda: waiters(r, name) == 2)  # every wait connection is waiting

    late = leasehold.Lock(r, name, timeout=30)
    started = time.monotonic()
    assert not late.acquire(blocking_timeout=0.5), "timed out while queued"
    assert 0.5 <= time.monotonic() - started < 5
    assert waiters(r, name) == 2, "it never reached the server"

    assert holder.extend(10), "the holder's synced renewal does not queue behind waiters"
    holder.release()
    for thread in threads:
        thread.join(30)
    assert served == [True, True]
    with pytest.raises(leasehold.LockError):
        leasehold.configure_pools(r, wait=4)
    leasehold.close_pools(r)
    leasehold.configure_pools(r, wait=4)  # new pools to come, once the old are closed
    assert holder.acquire(blocking=False)
    holder.release()


def test_a_full_sync_pool_makes_a_grant_queue_within_the_sync_timeout(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.Redis(port=master.port)
    leasehold.configure_pools(r, wait=1, sync=1)
    admin.config_set("lock.sync-timeout-ms", 3000)
    replica.signal(signal.SIGSTOP)
    slow = leasehold.Lock(r, name + ":slow", timeout=10, sync=leasehold.Sync(timeout=3))
    errors = []

    def grant_slowly():
        try:
            slow.acquire(blocking=False)
        except leasehold.NotReplicatedError as error:
            errors.append(error)

    thread = threading.Thread(target=grant_slowly)
    thread.start()
    wait_until(lambda: blocked_clients(admin) == 1)  # held by the server: the one sync connection
    quick = leasehold.Lock(r, name, timeout=10, sync=leasehold.Sync(timeout=0.5))
    started = time.monotonic()
    with pytest.raises(leasehold.NotReplicatedError, match="sync pool"):
        quick.acquire(blocking=False)
    assert 0.5 <= time.monotonic() - started < 2.5, "within its own sync timeout"
    assert r.exists(name) == 0, "never granted"
    thread.join(30)
    assert len(errors) == 1 and errors[0].reason.startswith("not every in-sync replica acknowledged")
    replica.signal(signal.SIGCONT)
    leasehold.close_pools(r)


@pytest.mark.every_redis_py
def test_concurrent_synced_grants_go_in_batches_over_the_sync_pool(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    leasehold.asyncio.configure_pools(r, sync=8)

    async def run() -> list:
        first = leasehold.asyncio.Lock(r, name, timeout=10)
        assert await first.acquire(blocking=False)  # warm-up: the client's own connections
        await first.release()
        before = connections_received(admin)
        acquires, syncs, waits = calls(admin, "lock.acquire", "lock.sync", "wait")

        # 64 tasks, each on a lock of its own, acquire and release 20 times: the grants waiting
        # for a connection go together, and the server holds each batch's LOCK.SYNC until the
        # replica has it, over at most 8 connections.
        async def task(n: int):
            lock = leasehold.asyncio.Lock(r, f"{name}:{n}", timeout=10, thread_local=False)
            for _ in range(20):
                assert await lock.acquire(blocking=False)
                await lock.release()
            assert await lock.acquire(blocking=False)
            return lock

        locks = await asyncio.gather(*(task(n) for n in range(64)))
        # The user's own pool opens one connection per concurrent release; the sync pool's are
        # what is bounded.
        opened = connections_received(admin) - before
        assert opened <= 8 + 64, f"{opened} connections opened"
        grants = calls(admin, "lock.acquire")[0] - acquires
        assert grants == 64 * 21, "one command per grant"
        batches = calls(admin, "lock.sync")[0] - syncs
        assert 0 < batches < grants / 2, f"{batches} LOCK.SYNC for {grants} grants: batched"
        assert calls(admin, "wait")[0] == waits, "no WAIT"
        return locks

    locks = asyncio.run(run())
    for lock in locks:
        assert fence(replica, lock.name) == lock.fencing_token, f"{lock.name} on the replica"
    sync_pool = [c for c in admin.client_list() if "lock.sync" in c.get("cmd", "")
                 or "lock.acquire" in c.get("cmd", "")]
    assert len(sync_pool) <= 8 + 1, "the sync pool's connections (and the session's)"


def test_grants_with_syncing_off_go_together_too_with_no_sync_behind_them(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    threaded = redis.Redis(port=master.port, max_connections=64)
    leasehold.asyncio.configure_pools(r, sync=8)
    acquires, syncs = calls(admin, "lock.acquire", "lock.sync")
    # The replica stopped: a grant that waited for it, or a LOCK.SYNC, would be refused
    # (NOREPLICAS after lock.sync-timeout-ms).
    replica.signal(signal.SIGSTOP)
    try:
        async def task(n: int) -> None:
            lock = leasehold.asyncio.Lock(r, f"{name}:{n}", timeout=10, thread_local=False,
                                          sync=leasehold.SYNC_OFF)
            for _ in range(20):
                assert await lock.acquire(blocking=False)
                await lock.release()

        async def run() -> None:
            await asyncio.gather(*(task(n) for n in range(64)))
            await leasehold.asyncio.close_pools(r)

        def worker(n: int) -> None:
            lock = leasehold.Lock(threaded, f"{name}:t{n}", timeout=10, thread_local=False,
                                  sync=leasehold.SYNC_OFF)
            for _ in range(20):
                assert lock.acquire(blocking=False)
                lock.release()

        asyncio.run(run())
        in_threads(worker, [(n,) for n in range(16)])
    finally:
        replica.signal(signal.SIGCONT)
    assert calls(admin, "lock.acquire")[0] - acquires == 64 * 20 + 16 * 20
    assert calls(admin, "lock.sync")[0] == syncs, "no LOCK.SYNC behind a batch"
    # At most two senders per master at once, each on a connection of the sync pool: every
    # grant of the 16 threads went on at most two connections (the releases on the client's own).
    acquiring = [c for c in admin.client_list() if c.get("cmd") == "lock.acquire"]
    assert 1 <= len(acquiring) <= 2, f"{len(acquiring)} connections carried the grants"
    leasehold.close_pools(threaded)


@pytest.mark.every_redis_py
def test_concurrent_synced_grants_from_threads_go_in_batches_too(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.Redis(port=master.port, max_connections=64)
    leasehold.configure_pools(r, sync=4)
    first = leasehold.Lock(r, name, timeout=10)
    assert first.acquire(blocking=False)
    first.release()
    acquires, syncs = calls(admin, "lock.acquire", "lock.sync")
    held = []

    def worker(n: int) -> None:
        lock = leasehold.Lock(r, f"{name}:{n}", timeout=10, thread_local=False)
        for _ in range(20):
            assert lock.acquire(blocking=False)
            lock.release()
        assert lock.acquire(blocking=False)
        held.append(lock)

    in_threads(worker, [(n,) for n in range(16)])
    assert len(held) == 16
    grants = calls(admin, "lock.acquire")[0] - acquires
    assert grants == 16 * 21
    assert calls(admin, "lock.sync")[0] - syncs > 0, "some went together"
    for lock in held:
        assert fence(replica, lock.name) == lock.fencing_token
    leasehold.close_pools(r)
