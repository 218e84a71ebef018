"""Grants and renewals synced to the master's in-sync replicas before they count
(``leasehold.Sync``: the server holds each write's reply until they have it, ``SYNC``), sync and
asyncio, on a real master and replicas: running, stopped (``SIGSTOP``), detached, and attached
just before a grant. Replicas killed for good: test_replica_killed.py and test_watchdog.py."""

import asyncio
import contextlib
import signal
import threading
import time

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import (ACKED_LATE, QUICK, SYNC_TIMEOUT_MS, Server, aclose, fence, in_threads,
                      insync_replicas, stop_all, wait_until, waiters)

#: About 25 s of tests: started first (conftest.py).
pytestmark = pytest.mark.long

#: A session's grace longer than any lease here: ``lease_end`` is the lease's end then (with a
#: shorter one, the session's deadline when sooner, which every heartbeat moves on).
LONG_GRACE = 60


def blocked_clients(admin) -> int:
    return int(admin.info("clients")["blocked_clients"])


def calls(admin, *commands: str) -> tuple:
    """How many times the server ran each of ``commands`` so far (``INFO commandstats``)."""
    stats = admin.info("commandstats")
    return tuple(int(stats.get(f"cmdstat_{command}", {}).get("calls", 0)) for command in commands)


def test_a_lone_server_requires_no_replica(server, name):
    offset, acked, members, required, _, _ = redis.Redis(port=server.port).execute_command("LOCK.INSYNC")
    assert (acked, members, required) == (offset, 0, 0)
    lock = leasehold.Lock(redis.Redis(port=server.port), name, timeout=10, sync=leasehold.Sync(timeout=5))
    started = time.monotonic()
    assert lock.acquire(blocking=False)
    assert time.monotonic() - started < 1, "nothing to wait for: the server replies at once"
    lock.release()


def test_a_grant_is_on_the_replica_when_returned_immediate_or_handed_over(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    before = calls(r, "lock.insync", "wait", "lock.acquire", "lock.renew")
    holder = leasehold.Lock(r, name, timeout=10)
    assert holder.acquire(blocking=False)
    assert fence(replica, name) == holder.fencing_token, "already on the replica"
    assert holder.extend(5)
    waiter = leasehold.Lock(r, name, timeout=10, blocking_timeout=5)
    got = {}
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire(), token=waiter.local.fencing_token))
    thread.start()
    wait_until(lambda: waiters(r, name) == 1)
    holder.release()
    thread.join()
    assert got["ok"] and fence(replica, name) == got["token"], "the hand-over too"
    after = calls(r, "lock.insync", "wait", "lock.acquire", "lock.renew")
    # Two renewals: the holder's, and the server's own once the waiter's held grant counted
    # (a grant with WAIT is made longer while its reply is held, then set to its lease).
    assert [n - m for n, m in zip(after, before)] == [0, 0, 2, 2], \
        "one command a step: no LOCK.INSYNC, no WAIT"


def test_a_grant_the_replica_lacks_is_refused_by_the_server_and_left_free(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    sent = []
    send = r.execute_command
    r.execute_command = lambda *args, **options: sent.append(args[0]) or send(*args, **options)
    lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
    replica.signal(signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE) as refused:
        lock.acquire(blocking=False)
    assert SYNC_TIMEOUT_MS / 1000 - 0.05 <= time.monotonic() - started < 1.5, "the server's timeout"
    assert refused.value.reason == ACKED_LATE
    assert str(refused.value) == f"NOREPLICAS {ACKED_LATE}; the grant was released"
    assert (refused.value.acked, refused.value.wanted) == (None, None)
    assert isinstance(refused.value, leasehold.LockError)
    assert r.exists(name) == 0, "released by the server"
    assert "LOCK.RELEASE" not in sent, "not by the client"
    assert lock.fencing_token is None and lock.lease_end is None, "no holding"
    keys = [f"{{{name}}}:a", f"{{{name}}}:b"]
    both = leasehold.MultiLock(r, keys, timeout=10, sync=QUICK)
    with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE):
        both.acquire(blocking=False)
    assert r.exists(*keys) == 0, "the set released by the server"
    threading.Timer(0.5, replica.signal, args=(signal.SIGCONT,)).start()
    assert lock.acquire(blocking_timeout=5), "retried within the wait"
    assert fence(replica, name) == lock.fencing_token
    lock.release()
    replica.signal(signal.SIGSTOP)
    off = leasehold.Lock(r, name + ":off", timeout=10, sync=leasehold.SYNC_OFF)
    assert off.acquire(blocking=False), "NOSYNC: the master replies at once"
    replica.signal(signal.SIGCONT)


def test_a_lost_reply_to_a_held_grant_closes_the_connection_and_the_server_releases_it(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    r.config_set("lock.sync-timeout-ms", 10_000)  # longer than the client waits for the reply
    lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
    replica.signal(signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        lock.acquire(blocking=False)
    # 1 s (lock.sync-timeout-ms's default) + 1 s of margin, and 1 s for LOCK.SESSION USE before.
    assert 1.9 <= time.monotonic() - started < 4
    wait_until(lambda: r.exists(name) == 0, timeout=3)  # released once its client was gone
    replica.signal(signal.SIGCONT)
    r.config_set("lock.sync-timeout-ms", SYNC_TIMEOUT_MS)
    assert lock.acquire(blocking=False), "the lock is free, the sync pool dials anew"
    lock.release()


def test_a_replica_attached_just_before_a_grant_is_waited_for(name):
    master = Server("--repl-diskless-sync-delay", "0",
                    module_args=("sync-timeout-ms", str(SYNC_TIMEOUT_MS)))
    spare = Server()
    try:
        r = redis.Redis(port=master.port)
        lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
        assert lock.acquire(blocking=False), "a lone master: nothing to wait for"
        lock.release()
        redis.Redis(port=spare.port).execute_command("REPLICAOF", "127.0.0.1", master.port)
        wait_until(lambda: insync_replicas(master) == 1)
        spare.signal(signal.SIGSTOP)
        with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE):
            lock.acquire(blocking=False)
        waiter = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
        with pytest.raises(leasehold.NotReplicatedError):
            waiter.acquire(blocking_timeout=0.3)  # a grant after a wait is held the same way
        assert r.exists(name) == 0
    finally:
        stop_all([master, spare])


def test_a_renewal_the_replica_lacks_does_not_count(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    leasehold.configure_sessions(r, grace=LONG_GRACE)
    lock = leasehold.Lock(r, name, timeout=10, sync=QUICK)
    assert lock.acquire(blocking=False)
    granted_end = lock.lease_end
    assert granted_end is not None and granted_end <= time.monotonic() + 10
    assert lock.extend(5) and lock.lease_end > granted_end, "a synced renewal counts"
    synced_end = lock.lease_end
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError) as refused:
        lock.extend(20)
    assert refused.value.reason == ACKED_LATE
    assert str(refused.value).endswith("the renewal does not count: the lease before it does")
    assert lock.lease_end == synced_end, "the lease believed is the last counted one"
    with pytest.raises(leasehold.NotReplicatedError):
        lock.reacquire()
    assert lock.lease_end <= time.monotonic() + 10 < synced_end, (
        "the master may have reset it to 10 s, shorter than what was left: no more than that")
    assert lock.owned(), "still held: the master has the renewal"
    replica.signal(signal.SIGCONT)
    assert lock.extend(20) and lock.lease_end > synced_end
    lock.release()
    assert lock.lease_end is None


def test_a_watched_holding_the_replica_stops_acknowledging_is_lost_when_its_lease_ends(replicated, name):
    master, replica = replicated
    lock = leasehold.Lock(redis.Redis(port=master.port), name, timeout=1, watchdog=True, sync=QUICK)
    assert lock.acquire(blocking=False)
    time.sleep(1.5)
    assert not lock.lost.is_set(), "renewed while the replica acknowledged"
    replica.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    last_synced_end = lock.lease_end
    assert stopped < last_synced_end <= stopped + 1
    assert lock.lost.wait(10), "lost"
    assert time.monotonic() >= last_synced_end, "not before its last synced lease ended"
    assert lock.lease_end == last_synced_end
    assert lock.owned(), "the master still has it: its renewals were applied, not counted"
    lock.release()


def test_a_replica_that_left_counts_until_the_master_drops_it(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
    assert lock.acquire(blocking=False)
    lock.release()
    redis.Redis(port=replica.port).execute_command("REPLICAOF", "NO", "ONE")
    for _ in range(2):
        with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE):
            lock.acquire(blocking=False)
    assert insync_replicas(master) == 1, "dropped only after lock.insync-timeout-ms and more"
    assert leasehold.Lock(r, name, timeout=10, sync=leasehold.SYNC_OFF).acquire(blocking=False)


async def test_asyncio_grants_and_renewals_are_synced_too(replicated, name):
    master, replica = replicated
    r = redis.asyncio.Redis(port=master.port)
    admin = redis.Redis(port=master.port)
    leasehold.asyncio.configure_sessions(r, grace=LONG_GRACE)
    lock = leasehold.asyncio.Lock(r, name, timeout=10, sync=QUICK)
    assert await lock.acquire(blocking=False)
    assert fence(replica, name) == lock.fencing_token
    await lock.release()
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE):
        await lock.acquire(blocking=False)
    assert admin.exists(name) == 0, "released by the server"
    asyncio.get_running_loop().call_later(0.5, replica.signal, signal.SIGCONT)
    assert await lock.acquire(blocking_timeout=5)
    synced_end = lock.lease_end
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError):
        await lock.extend(5)
    assert lock.lease_end == synced_end
    replica.signal(signal.SIGCONT)
    assert await lock.extend(5) and lock.lease_end > synced_end
    await lock.release()

    watched = leasehold.asyncio.Lock(r, name, timeout=1, watchdog=True, sync=QUICK)
    assert await watched.acquire(blocking=False)
    await asyncio.sleep(1.5)
    assert not watched.lost.is_set()
    replica.signal(signal.SIGSTOP)
    last_synced_end = watched.lease_end
    await asyncio.wait_for(watched.lost.wait(), 10)
    assert time.monotonic() >= last_synced_end
    await watched.release()
    await aclose(r)


@pytest.mark.every_redis_py
async def test_a_batch_the_replica_does_not_get_has_every_grant_released_and_reported(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    leasehold.asyncio.configure_pools(r, sync=1)
    leasehold.asyncio.configure_sessions(r, grace=LONG_GRACE)
    # Queued up to 2 s for the one connection: the server refuses each batch at 200 ms.
    slow = leasehold.Sync(timeout=2)
    holders = [leasehold.asyncio.Lock(r, f"{name}:held:{n}", timeout=10, sync=slow) for n in range(4)]
    for holder in holders:
        assert await holder.acquire(blocking=False)
    synced_ends = [holder.lease_end for holder in holders]
    syncs, releases = calls(admin, "lock.sync", "lock.release")
    replica.signal(signal.SIGSTOP)
    locks = [leasehold.asyncio.Lock(r, f"{name}:{n}", timeout=10, sync=slow) for n in range(8)]
    outcomes = await asyncio.gather(*(lock.acquire(blocking=False) for lock in locks),
                                    *(holder.extend(20) for holder in holders),
                                    return_exceptions=True)
    for outcome in outcomes[:8]:
        assert isinstance(outcome, leasehold.NotReplicatedError), outcome
        assert outcome.reason == ACKED_LATE
        assert str(outcome) == f"NOREPLICAS {ACKED_LATE}; the grant was released"
    for outcome in outcomes[8:]:
        assert isinstance(outcome, leasehold.NotReplicatedError), outcome
        assert str(outcome).endswith("the renewal does not count: the lease before it does")
    assert admin.exists(*(lock.name for lock in locks)) == 0, "every grant released"
    assert [holder.lease_end for holder in holders] == synced_ends, "the leases before count"
    assert all(lock.fencing_token is None for lock in locks)
    batches, released = (n - m for n, m in zip(calls(admin, "lock.sync", "lock.release"),
                                               (syncs, releases)))
    assert 0 < batches < 12, f"{batches} LOCK.SYNC for 12 writes over one connection: batched"
    assert released >= 1, "released by the client: LOCK.SYNC undoes nothing"
    replica.signal(signal.SIGCONT)
    for holder in holders:
        assert await holder.owned(), "a renewal refused leaves the holding"
        await holder.release()
    await leasehold.asyncio.close_pools(r)
    await aclose(r)


@pytest.mark.every_redis_py
def test_a_batch_of_threads_the_replica_does_not_get_is_released_and_reported(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.Redis(port=master.port, max_connections=16)
    leasehold.configure_pools(r, sync=1)
    slow = leasehold.Sync(timeout=2)
    first = leasehold.Lock(r, name, timeout=10, sync=slow)
    assert first.acquire(blocking=False)
    first.release()
    replica.signal(signal.SIGSTOP)
    locks = [leasehold.Lock(r, f"{name}:{n}", timeout=10, sync=slow, thread_local=False)
             for n in range(8)]
    errors = []

    def grant(lock) -> None:
        try:
            lock.acquire(blocking=False)
        except leasehold.NotReplicatedError as error:
            errors.append(error)

    in_threads(grant, [(lock,) for lock in locks])
    assert len(errors) == 8
    assert all(str(error) == f"NOREPLICAS {ACKED_LATE}; the grant was released" for error in errors)
    assert admin.exists(*(lock.name for lock in locks)) == 0, "every grant released"
    replica.signal(signal.SIGCONT)
    leasehold.close_pools(r)


@contextlib.asynccontextmanager
async def held_long(master: Server, name: str, sync: int):
    """An asyncio client of ``master`` with a sync pool of ``sync`` connections, the master
    holding a synced write up to 10 s: ``(admin, lock)``, ``lock(suffix)`` making a lock
    ``name:suffix`` whose writes wait up to 15 s. The setting and the client are undone after."""
    admin = redis.Redis(port=master.port)
    admin.config_set("lock.sync-timeout-ms", 10_000)
    r = redis.asyncio.Redis(port=master.port)
    leasehold.asyncio.configure_pools(r, sync=sync)
    long = leasehold.Sync(timeout=15)

    def lock(suffix: str):
        return leasehold.asyncio.Lock(r, f"{name}:{suffix}", timeout=30, sync=long,
                                      thread_local=False)

    try:
        yield admin, lock
    finally:
        admin.config_set("lock.sync-timeout-ms", SYNC_TIMEOUT_MS)
        await leasehold.asyncio.close_pools(r)
        await aclose(r)


async def test_a_caller_that_leaves_a_batch_has_its_grant_released(replicated, name):
    master, replica = replicated
    async with held_long(master, name, sync=2) as (admin, lock):
        replica.signal(signal.SIGSTOP)
        # Two go alone (SYNC, each held by the server on a connection of its own: the two
        # senders); the next two queue behind them, and go together once a connection is free.
        alone = []
        for n in range(2):
            alone.append(asyncio.ensure_future(lock(f"alone:{n}").acquire(blocking=False)))
            for _ in range(100):
                if blocked_clients(admin) == n + 1:
                    break
                await asyncio.sleep(0.02)
            assert blocked_clients(admin) == n + 1
        staying, leaving = lock("staying"), lock("leaving")
        stays = asyncio.ensure_future(staying.acquire(blocking=False))
        leaves = asyncio.ensure_future(leaving.acquire(blocking=False))
        await asyncio.sleep(0.1)
        for client in admin.client_list():
            if client["cmd"] == "lock.acquire":
                admin.client_unblock(client["id"], error=True)  # refused: undone by the server
        await asyncio.gather(*alone, return_exceptions=True)
        for _ in range(100):  # the batch's LOCK.SYNC is held
            if any(client["cmd"] == "lock.sync" for client in admin.client_list()):
                break
            await asyncio.sleep(0.02)
        leaves.cancel()
        replica.signal(signal.SIGCONT)
        assert await stays
        with pytest.raises(asyncio.CancelledError):
            await leaves
        assert fence(replica, staying.name) == staying.fencing_token, "the batch went on"
        for _ in range(100):  # released in the background once the batch was answered
            if admin.exists(leaving.name) == 0:
                break
            await asyncio.sleep(0.05)
        assert admin.exists(leaving.name) == 0, "the grant of the caller that left is released"
        assert admin.info("commandstats")["cmdstat_lock.sync"]["calls"] >= 1


async def test_a_batch_whose_connection_is_lost_fails_every_caller_and_releases_its_grants(
        replicated, name):
    master, replica = replicated
    async with held_long(master, name, sync=1) as (admin, lock):
        replica.signal(signal.SIGSTOP)
        # The first goes alone (SYNC, held by the server on the one connection); two more queue
        # behind it and go together, NOSYNC each, once it is answered.
        alone = asyncio.ensure_future(lock("alone").acquire(blocking=False))
        for _ in range(100):
            if blocked_clients(admin) == 1:
                break
            await asyncio.sleep(0.02)
        batched = [lock(f"batched:{n}") for n in range(2)]
        tries = [asyncio.ensure_future(one.acquire(blocking=False)) for one in batched]
        await asyncio.sleep(0.1)
        for client in admin.client_list():
            if client["cmd"] == "lock.acquire":
                admin.client_unblock(client["id"], error=True)  # refused: undone by the server
        await asyncio.gather(alone, return_exceptions=True)
        syncing = []
        for _ in range(100):  # the batch's LOCK.SYNC is held
            syncing = [client for client in admin.client_list() if client["cmd"] == "lock.sync"]
            if syncing:
                break
            await asyncio.sleep(0.02)
        assert admin.exists(*(one.name for one in batched)) == 2, "granted, NOSYNC"
        admin.client_kill_filter(_id=syncing[0]["id"])  # the batch's replies are lost
        outcomes = await asyncio.gather(*tries, return_exceptions=True)
        assert all(isinstance(outcome, redis.ConnectionError) for outcome in outcomes), outcomes
        replica.signal(signal.SIGCONT)
        for _ in range(100):  # released in the background: LOCK.SYNC undoes nothing
            if admin.exists(*(one.name for one in batched)) == 0:
                break
            await asyncio.sleep(0.05)
        assert admin.exists(*(one.name for one in batched)) == 0, "their grants are released"
