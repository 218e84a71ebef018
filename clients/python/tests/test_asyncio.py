"""leasehold.asyncio over redis.asyncio, on a real server: the drop-in path, a wait longer than
the socket timeout, the lost reply, the watchdog, the read-write lock and the semaphore."""

import asyncio
import time

import pytest
import redis
import redis.asyncio
from redis.exceptions import LockNotOwnedError

import leasehold.asyncio
from conftest import aclose, waiters


async def eventually(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("protocol", [2, 3])
async def test_drop_in_through_r_lock(server, name, admin, protocol):
    r = redis.asyncio.Redis.from_url(server.url, protocol=protocol, decode_responses=True)
    async with r.lock(name, timeout=10, lock_class=leasehold.asyncio.Lock) as lock:
        assert isinstance(lock.fencing_token, int)
        assert await lock.owned() and await lock.locked()
        assert await lock.extend(5)
        assert 14_000 < admin.pttl(name) <= 15_000
        assert await lock.reacquire()
    assert not await lock.locked()
    await aclose(r)


@pytest.mark.every_redis_py
async def test_a_wait_longer_than_the_socket_timeout(server, name):
    holder = leasehold.asyncio.Lock(redis.asyncio.Redis(port=server.port), name, timeout=30)
    assert await holder.acquire()
    short = redis.asyncio.Redis(port=server.port, socket_timeout=0.5)
    waiter = leasehold.asyncio.Lock(short, name, timeout=30, blocking_timeout=5)

    async def release_later():
        await asyncio.sleep(1.5)
        await holder.release()

    releasing = asyncio.ensure_future(release_later())
    started = time.monotonic()
    assert await waiter.acquire()
    assert 1.4 < time.monotonic() - started < 3
    await releasing
    await waiter.release()


@pytest.mark.every_redis_py
async def test_a_lost_reply_is_recovered(server, proxy, name, admin):
    holder = leasehold.asyncio.Lock(redis.asyncio.Redis(port=server.port), name, timeout=30)
    assert await holder.acquire()
    waiter = leasehold.asyncio.Lock(
        redis.asyncio.Redis(port=proxy.port), name, timeout=30, blocking_timeout=1.0)

    async def wait_then_release():
        # A holding is its task's: acquired and released in one task.
        assert await waiter.acquire() is True
        assert admin.execute_command("LOCK.FENCE", name) == waiter.fencing_token
        await waiter.release()

    waiting = asyncio.ensure_future(wait_then_release())
    await eventually(lambda: waiters(admin, name) == 1)
    proxy.stall_last_connection()
    await holder.release()
    await waiting


async def test_the_watchdog_keeps_the_lock_and_tells_when_it_is_lost(server, name, admin):
    lock = leasehold.asyncio.Lock(redis.asyncio.Redis(port=server.port), name, timeout=0.3,
                                  watchdog=True)
    assert await lock.acquire()
    await asyncio.sleep(1.2)
    assert await lock.owned()
    admin.delete(name)
    await asyncio.wait_for(lock.lost.wait(), 0.5)
    await asyncio.sleep(0.4)
    assert admin.exists(name) == 0
    with pytest.raises(LockNotOwnedError):
        await lock.release()


async def test_read_write_lock_and_semaphore(server, name):
    r = redis.asyncio.Redis(port=server.port)
    first = leasehold.asyncio.ReadWriteLock(r, name, timeout=10)
    second = leasehold.asyncio.ReadWriteLock(r, name, timeout=10)
    assert await first.read.acquire(blocking=False)
    assert await second.read.acquire(blocking=False)
    assert not await first.write.acquire(blocking=False)

    async def write():
        assert await first.write.acquire(blocking_timeout=5)
        await first.write.release()

    writing = asyncio.ensure_future(write())
    await asyncio.sleep(0.2)
    await first.read.release()
    await second.read.release()
    await writing
    permit = leasehold.asyncio.Semaphore(r, name + ":pool", 1, timeout=10)
    assert await permit.acquire(blocking=False)
    other = leasehold.asyncio.Semaphore(r, name + ":pool", 1, timeout=10)
    assert not await other.acquire(blocking=False)


async def test_tasks_sharing_one_lock_take_turns(server, name):
    r = redis.asyncio.Redis(port=server.port)
    lock = r.lock(name, timeout=10, lock_class=leasehold.asyncio.Lock)
    inside, grants = [0], []

    async def loop():
        for _ in range(5):
            async with lock:
                inside[0] += 1
                assert inside[0] == 1, "two inside at once"
                grants.append(lock.fencing_token)
                await asyncio.sleep(0.002)
                inside[0] -= 1

    await asyncio.gather(*(loop() for _ in range(8)))
    assert len(grants) == 40
    assert grants == sorted(grants) and len(set(grants)) == 40, "in grant order"
    await aclose(r)


async def test_reader_tasks_sharing_one_lock_each_keep_their_own_holding(server, name, admin):
    r = redis.asyncio.Redis(port=server.port)
    read = leasehold.asyncio.ReadWriteLock(r, name, timeout=10).read
    both_in, release = asyncio.Event(), asyncio.Event()
    tokens = []

    async def reader():
        assert await read.acquire(blocking=False)
        tokens.append(read.fencing_token)
        if len(tokens) == 2:
            both_in.set()
        await release.wait()
        assert await read.owned()
        await read.release()

    readers = [asyncio.ensure_future(reader()) for _ in range(2)]
    await both_in.wait()
    assert tokens[0] != tokens[1], "two holdings, one per task"
    assert not await read.owned(), "this task holds nothing"
    release.set()
    await asyncio.gather(*readers)
    assert admin.exists(name) == 0, "each task released its own holding"
    await aclose(r)
