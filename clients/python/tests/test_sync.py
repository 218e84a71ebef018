"""Grants synced to the master's replicas before they are returned (``leasehold.Sync``), sync
and asyncio, on a real master and replica: running, stopped (``SIGSTOP``) and detached."""

import asyncio
import signal
import threading

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import wait_until, waiters

QUICK = leasehold.Sync(timeout=0.2)


def waits(server) -> int:
    stats = redis.Redis(port=server.port).info("commandstats").get("cmdstat_wait", {})
    return int(stats.get("calls", 0))


def fence(server, name):
    return redis.Redis(port=server.port).execute_command("LOCK.FENCE", name)


def learned_one_replica(r, name):
    """A lock whose grants wait up to 0.2 s for the replicas, after a grant that learned the one
    replica of the master."""
    lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
    assert lock.acquire(blocking=False)
    lock.release()
    return lock


def test_a_lone_server_pays_nothing(server, name):
    before = waits(server)
    lock = leasehold.Lock(redis.Redis(port=server.port), name, timeout=10)
    assert lock.acquire(blocking=False)
    lock.release()
    assert waits(server) == before


def test_a_grant_is_on_the_replica_when_returned_immediate_or_handed_over(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    holder = leasehold.Lock(r, name, timeout=10)
    assert holder.acquire(blocking=False)
    assert fence(replica, name) == holder.fencing_token, "already on the replica"
    waiter = leasehold.Lock(r, name, timeout=10, blocking_timeout=5)
    got = {}
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire(), token=waiter.local.fencing_token))
    thread.start()
    wait_until(lambda: waiters(r, name) == 1)
    holder.release()
    thread.join()
    assert got["ok"] and fence(replica, name) == got["token"], "the hand-over too"


def test_a_grant_the_replica_lacks_is_released_and_reported_or_retried(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    lock = learned_one_replica(r, name)
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError) as refused:
        lock.acquire(blocking=False)
    assert (refused.value.acked, refused.value.wanted) == (0, 1)
    assert isinstance(refused.value, leasehold.LockError)
    assert r.exists(name) == 0, "released"
    threading.Timer(0.5, replica.signal, args=(signal.SIGCONT,)).start()
    assert lock.acquire(blocking_timeout=5), "retried within the wait"
    assert fence(replica, name) == lock.fencing_token
    lock.release()
    off = leasehold.Lock(r, name + ":off", timeout=10, sync=leasehold.SYNC_OFF)
    assert off.acquire(blocking=False)


def test_a_replica_the_same_master_lost_still_counts(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    lock = learned_one_replica(r, name)
    redis.Redis(port=replica.port).execute_command("REPLICAOF", "NO", "ONE")
    for _ in range(2):
        with pytest.raises(leasehold.NotReplicatedError):
            lock.acquire(blocking=False)
    assert leasehold.Lock(r, name, timeout=10, sync=leasehold.Sync(replicas=0)).acquire(blocking=False)


async def test_asyncio_grants_are_synced_too(replicated, name):
    master, replica = replicated
    r = redis.asyncio.Redis(port=master.port)
    lock = leasehold.asyncio.Lock(r, name, timeout=10, sync=QUICK)
    assert await lock.acquire(blocking=False)
    assert fence(replica, name) == lock.fencing_token
    await lock.release()
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError):
        await lock.acquire(blocking=False)
    asyncio.get_running_loop().call_later(0.5, replica.signal, signal.SIGCONT)
    assert await lock.acquire(blocking_timeout=5)
    await lock.release()
    await r.aclose() if hasattr(r, "aclose") else await r.close()
