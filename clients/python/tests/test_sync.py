"""Grants and renewals synced to the master's in-sync replicas before they count
(``leasehold.Sync``), sync and asyncio, on a real master and replicas: running, stopped
(``SIGSTOP``), detached, and attached just before a grant. Replicas killed for good:
test_replica_killed.py and test_watchdog.py."""

import asyncio
import signal
import threading
import time

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import (ACKED_LATE, QUICK, Server, aclose, fence, insync_replicas, stop_all, wait_until,
                      waiters)

#: About 25 s of tests: started first (conftest.py).
pytestmark = pytest.mark.long

#: A session's grace longer than any lease here: ``lease_end`` is the lease's end then (with a
#: shorter one, the session's deadline when sooner, which every heartbeat moves on).
LONG_GRACE = 60


def test_a_lone_server_requires_no_replica(server, name):
    offset, acked, members, required, _, _ = redis.Redis(port=server.port).execute_command("LOCK.INSYNC")
    assert (acked, members, required) == (offset, 0, 0)
    lock = leasehold.Lock(redis.Redis(port=server.port), name, timeout=10, sync=leasehold.Sync(timeout=5))
    started = time.monotonic()
    assert lock.acquire(blocking=False)
    assert time.monotonic() - started < 1, "WAIT 0 does not wait"
    lock.release()


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
    # A new client, which has seen no LOCK.INSYNC: the set comes in the grant's own round trip.
    lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE) as refused:
        lock.acquire(blocking=False)
    assert (refused.value.acked, refused.value.wanted) == (0, 1)
    assert isinstance(refused.value, leasehold.LockError)
    assert r.exists(name) == 0, "released"
    assert lock.fencing_token is None and lock.lease_end is None, "no holding"
    threading.Timer(0.5, replica.signal, args=(signal.SIGCONT,)).start()
    assert lock.acquire(blocking_timeout=5), "retried within the wait"
    assert fence(replica, name) == lock.fencing_token
    lock.release()
    off = leasehold.Lock(r, name + ":off", timeout=10, sync=leasehold.SYNC_OFF)
    assert off.acquire(blocking=False)


def test_a_replica_attached_just_before_a_grant_is_waited_for(name):
    master, spare = Server("--repl-diskless-sync-delay", "0"), Server()
    try:
        r = redis.Redis(port=master.port)
        lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
        assert lock.acquire(blocking=False), "a lone master: nothing to wait for"
        lock.release()
        redis.Redis(port=spare.port).execute_command("REPLICAOF", "127.0.0.1", master.port)
        wait_until(lambda: insync_replicas(master) == 1)
        spare.signal(signal.SIGSTOP)
        # The last LOCK.INSYNC this client saw had no member: WAIT 0, then WAIT 1.
        with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE) as refused:
            lock.acquire(blocking=False)
        assert (refused.value.acked, refused.value.wanted) == (0, 1)
        waiter = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
        with pytest.raises(leasehold.NotReplicatedError):
            waiter.acquire(blocking_timeout=0.3)
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
    assert (refused.value.acked, refused.value.wanted) == (0, 1)
    assert lock.lease_end == synced_end, "the lease believed is the last synced one"
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
    assert lock.owned(), "the master still has it: its renewals were applied, not synced"
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
    leasehold.asyncio.configure_sessions(r, grace=LONG_GRACE)
    lock = leasehold.asyncio.Lock(r, name, timeout=10, sync=QUICK)
    assert await lock.acquire(blocking=False)
    assert fence(replica, name) == lock.fencing_token
    await lock.release()
    replica.signal(signal.SIGSTOP)
    with pytest.raises(leasehold.NotReplicatedError):
        await lock.acquire(blocking=False)
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
