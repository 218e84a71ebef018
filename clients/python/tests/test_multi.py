"""leasehold.MultiLock (sync and asyncio) on a real server: several locks taken together with
one token per key, released and renewed together, threads and tasks sharing one object taking
turns, sets asked for in crossed key orders never deadlocking, the watchdog telling when part
of a set is lost, and the grant on the replica before it is returned."""

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio
from redis.exceptions import LockNotOwnedError

import leasehold
import leasehold.asyncio
from conftest import aclose, in_threads, wait_until


def keys(name):
    return [f"{{{name}}}:a", f"{{{name}}}:b"]


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_set_is_taken_renewed_and_released_whole(server, name, admin, protocol):
    r = redis.Redis.from_url(server.url, protocol=protocol, decode_responses=True)
    lock = leasehold.MultiLock(r, keys(name), timeout=10)
    with lock:
        tokens = lock.fencing_tokens
        assert len(tokens) == 2 and tokens[0] == tokens[1] == lock.fencing_token
        assert lock.owned() and lock.locked()
        assert not leasehold.Lock(r, keys(name)[1], timeout=10).acquire(blocking=False)
        assert lock.extend(5)
        assert all(14_000 < admin.pttl(key) <= 15_000 for key in keys(name))
        admin.delete(keys(name)[0])
        assert not lock.owned(), "part of the set is gone"
        with pytest.raises(LockNotOwnedError):
            lock.reacquire()
        admin.delete(keys(name)[1])
        assert lock.acquire(blocking=False) is True
    assert not lock.locked() and admin.exists(*keys(name)) == 0


def test_threads_sharing_one_set_and_crossed_sets_take_turns(server, name):
    r = redis.Redis(port=server.port)
    forward = leasehold.MultiLock(r, keys(name), timeout=10, blocking_timeout=10)
    backward = leasehold.MultiLock(r, keys(name)[::-1], timeout=10, blocking_timeout=10)
    inside, failures = [0], []
    guard = threading.Lock()

    def loop(lock):
        try:
            for _ in range(10):
                with lock:
                    with guard:
                        inside[0] += 1
                        assert inside[0] == 1, "two inside at once"
                    time.sleep(0.001)
                    with guard:
                        inside[0] -= 1
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)

    in_threads(loop, [(lock,) for lock in [forward, backward] * 3])
    assert failures == []
    assert int(r.info("lock")["lock_multi_acquisitions"]) >= 60


def test_the_watchdog_tells_when_part_of_a_set_is_lost(server, name, admin):
    r = redis.Redis(port=server.port)
    lock = leasehold.MultiLock(r, keys(name), timeout=0.3, watchdog=True)
    assert lock.acquire(blocking=False)
    time.sleep(0.9)
    assert not lock.lost.is_set() and lock.owned()
    admin.delete(keys(name)[0])
    assert lock.lost.wait(2), "lost once a key is gone"
    wait_until(lambda: admin.exists(keys(name)[1]) == 0)


def test_a_set_is_on_the_replica_when_returned(replicated, name):
    master, replica = replicated
    lock = leasehold.MultiLock(redis.Redis(port=master.port), keys(name), timeout=10)
    assert lock.acquire(blocking=False)
    on_replica = redis.Redis(port=replica.port)
    assert [on_replica.execute_command("LOCK.FENCE", key) for key in keys(name)] == lock.fencing_tokens


async def test_asyncio_tasks_sharing_one_set_take_turns(server, name, admin):
    r = redis.asyncio.Redis.from_url(server.url)
    lock = leasehold.asyncio.MultiLock(r, keys(name), timeout=10, blocking_timeout=10)
    inside, grants = [0], []

    async def loop():
        for _ in range(5):
            async with lock:
                inside[0] += 1
                assert inside[0] == 1, "two inside at once"
                grants.append(lock.fencing_tokens)
                await asyncio.sleep(0.001)
                inside[0] -= 1

    await asyncio.gather(*(loop() for _ in range(6)))
    assert len(grants) == 30 and all(len(tokens) == 2 for tokens in grants)
    assert admin.exists(*keys(name)) == 0
    await aclose(r)
