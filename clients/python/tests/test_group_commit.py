"""Group commit, sync and asyncio, on a real master and replica: synced writes that wait for a
sync connection at the same time share one round trip (its ``LOCK.INSYNC``, ``WAIT``,
``LOCK.INSYNC`` counted in the master's ``INFO commandstats``), each getting its own reply; a
cancelled sender strands no one, a cancelled caller whose write is still queued withdraws it,
and a round trip whose connection drops is a lost reply for every write in it."""

import asyncio
import signal
import threading
import time

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import aclose, fence, wait_until

#: About 25 s of tests: started first (conftest.py).
pytestmark = pytest.mark.long

#: Long enough that a stopped replica holds a round trip in its WAIT until resumed.
PATIENT = leasehold.Sync(timeout=10)
WRITES = 20


def round_trips(admin) -> tuple:
    """``LOCK.INSYNC`` and ``WAIT`` calls so far (a synced round trip sends two and one)."""
    stats = admin.info("commandstats")
    return tuple(int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
                 for command in ("lock.insync", "wait"))


def round_trips_since(admin, before: tuple) -> tuple:
    """``LOCK.INSYNC`` and ``WAIT`` calls since ``before``."""
    insyncs, waits = round_trips(admin)
    return insyncs - before[0], waits - before[1]


def blocked_waits(admin) -> list:
    """The ids of the clients blocked in a ``WAIT``."""
    return [client["id"] for client in admin.client_list()
            if client["cmd"] == "wait" and "b" in client["flags"]]


async def wait_blocked(admin) -> None:
    """Until one round trip's ``WAIT`` is blocked in the server (the replica stopped)."""
    while len(blocked_waits(admin)) != 1:
        await asyncio.sleep(0.01)


async def seen(r, name) -> None:
    """A first grant: the client sees the master's in-sync set, so the ``WAIT`` of each round
    trip after it waits for the one member (no second ``WAIT``)."""
    lock = leasehold.asyncio.Lock(r, name + ":first", timeout=10)
    assert await lock.acquire(blocking=False)
    await lock.release()


async def test_concurrent_synced_grants_and_renewals_share_round_trips(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    await seen(r, name)
    locks = [leasehold.asyncio.Lock(r, f"{name}:{n}", timeout=10, thread_local=False) for n in range(WRITES)]
    before = round_trips(admin)
    assert all(await asyncio.gather(*(lock.acquire(blocking=False) for lock in locks)))
    insyncs, waits = round_trips_since(admin, before)
    assert insyncs <= 4 and waits <= 2, f"{insyncs} LOCK.INSYNC and {waits} WAIT for {WRITES} grants"
    tokens = [lock.fencing_token for lock in locks]
    assert len(set(tokens)) == WRITES, "each its own reply"
    assert [fence(replica, lock.name) for lock in locks] == tokens, "each on the replica"

    before = round_trips(admin)
    assert all(await asyncio.gather(*(lock.reacquire() for lock in locks)))
    insyncs, waits = round_trips_since(admin, before)
    assert insyncs <= 4 and waits <= 2, f"{insyncs} LOCK.INSYNC and {waits} WAIT for {WRITES} renewals"
    await asyncio.gather(*(lock.release() for lock in locks))
    await aclose(r)


def test_threads_queued_behind_a_sender_go_in_one_round_trip(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.Redis(port=master.port)
    leasehold.configure_pools(r, sync=1)
    first = leasehold.Lock(r, name, timeout=10, sync=PATIENT, thread_local=False)
    assert first.acquire(blocking=False)  # sees the in-sync set
    first.release()
    before = round_trips(admin)
    replica.signal(signal.SIGSTOP)
    sender = threading.Thread(target=first.acquire, kwargs={"blocking": False})
    sender.start()
    wait_until(lambda: len(blocked_waits(admin)) == 1)  # its WAIT holds the one sync connection

    locks = [leasehold.Lock(r, f"{name}:{n}", timeout=10, sync=PATIENT, thread_local=False)
             for n in range(WRITES)]
    calling = threading.Barrier(WRITES + 1)
    got = []

    def grant(lock):
        calling.wait()
        got.append(lock.acquire(blocking=False))

    threads = [threading.Thread(target=grant, args=(lock,)) for lock in locks]
    for thread in threads:
        thread.start()
    calling.wait()
    time.sleep(0.3)  # each queues within microseconds of calling
    replica.signal(signal.SIGCONT)
    for thread in [sender, *threads]:
        thread.join(30)
    assert got == [True] * WRITES and first.fencing_token is not None
    insyncs, waits = round_trips_since(admin, before)
    assert insyncs <= 6 and waits <= 3, f"{insyncs} LOCK.INSYNC, {waits} WAIT: the sender's, the queue's"
    assert [fence(replica, lock.name) for lock in locks] == [lock.fencing_token for lock in locks]
    leasehold.close_pools(r)


async def test_a_cancelled_sender_strands_no_other_write_of_its_round_trip(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    await seen(r, name)
    locks = [leasehold.asyncio.Lock(r, f"{name}:{n}", timeout=10, sync=PATIENT, thread_local=False) for n in range(6)]
    before = round_trips(admin)
    replica.signal(signal.SIGSTOP)
    # Queued in one tick: the first caller sends them all in one round trip.
    grants = [asyncio.ensure_future(lock.acquire(blocking=False)) for lock in locks]
    await wait_blocked(admin)
    grants[0].cancel()
    replica.signal(signal.SIGCONT)
    with pytest.raises(asyncio.CancelledError):
        await grants[0]
    assert await asyncio.wait_for(asyncio.gather(*grants[1:]), 15) == [True] * 5
    assert [fence(replica, lock.name) for lock in locks[1:]] == [lock.fencing_token for lock in locks[1:]]
    assert round_trips_since(admin, before) == (2, 1), "one round trip carried them all"
    await aclose(r)


async def test_a_caller_cancelled_while_queued_withdraws_its_write(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    leasehold.configure_pools(r, sync=1)
    await seen(r, name)
    replica.signal(signal.SIGSTOP)
    sending = leasehold.asyncio.Lock(r, name, timeout=10, sync=PATIENT)
    sent = asyncio.ensure_future(sending.acquire(blocking=False))
    await wait_blocked(admin)
    queued = leasehold.asyncio.Lock(r, name + ":queued", timeout=10, sync=PATIENT)
    withdrawn = asyncio.ensure_future(queued.acquire(blocking=False))
    await asyncio.sleep(0.1)
    withdrawn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await withdrawn
    replica.signal(signal.SIGCONT)
    assert await asyncio.wait_for(sent, 15)
    assert await r.exists(name + ":queued") == 0, "never sent"
    late = leasehold.asyncio.Lock(r, name + ":late", timeout=10, sync=PATIENT)
    assert await asyncio.wait_for(late.acquire(blocking=False), 15), "the sender's place went on"
    await aclose(r)


async def test_a_round_trip_whose_connection_drops_is_a_lost_reply_for_each_write(replicated, name):
    master, replica = replicated
    admin = redis.Redis(port=master.port)
    r = redis.asyncio.Redis(port=master.port)
    await seen(r, name)
    locks = [leasehold.asyncio.Lock(r, f"{name}:{n}", timeout=10, sync=PATIENT, thread_local=False) for n in range(6)]
    replica.signal(signal.SIGSTOP)
    grants = [asyncio.ensure_future(lock.acquire(blocking=False)) for lock in locks]
    await wait_blocked(admin)
    admin.client_kill_filter(_id=blocked_waits(admin)[0])
    outcomes = await asyncio.wait_for(asyncio.gather(*grants, return_exceptions=True), 15)
    assert all(isinstance(outcome, redis.ConnectionError) for outcome in outcomes), outcomes
    replica.signal(signal.SIGCONT)
    assert await locks[0].acquire(blocking_timeout=15), "the lock is taken again on a new connection"
    await aclose(r)
