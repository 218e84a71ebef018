"""A holding's guarded command (``lock.guard``, ``LOCK.GUARD`` with the holding's owner and
fencing token) and a fenced command (``lock.fenced``, ``leasehold.fenced``, ``LOCK.FENCED``), sync
and asyncio, on a real server and on a master with a replica: the holder's command runs; a
holding whose lease ended, once another owner took the lock — or the same owner again, with a
new token — is refused with ``NotHeldError`` and changes nothing; a smaller token is refused by
a fence a larger one wrote through, with ``StaleTokenError``."""

import signal
import time

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import ACKED_LATE, QUICK, aclose, group, stop_all

CLIENTS = {
    "from_url": lambda server: redis.Redis.from_url(server.url),
    "resp3": lambda server: redis.Redis.from_url(server.url, protocol=3),
    "decoded": lambda server: redis.Redis.from_url(server.url, decode_responses=True),
}


@pytest.fixture(params=sorted(CLIENTS))
def r(request, server):
    client = CLIENTS[request.param](server)
    yield client
    client.close()


def number(value) -> int:
    return int(value)


@pytest.mark.every_redis_py
def test_the_holder_runs_its_command_and_a_lost_holding_is_refused_with_nothing_changed(r, name):
    stock = f"{name}:stock"
    r.set(stock, 10)
    old = leasehold.Lock(r, name, timeout=0.2)
    assert old.acquire(blocking=False)
    assert old.guard("DECRBY", stock, 1) == 9
    assert number(old.guard("GET", stock)) == 9, "the command's own reply, a read too"
    time.sleep(0.3)  # the lease ends; another owner takes the lock
    new = leasehold.Lock(r, name, timeout=10)
    assert new.acquire(blocking=False)
    with pytest.raises(leasehold.NotHeldError, match="^NOTHELD the lock is held by another owner"):
        old.guard("DECRBY", stock, 1)
    assert number(r.get(stock)) == 9, "the stale holder's command did not run"
    assert new.guard("DECRBY", stock, 2) == 7
    new.release()
    with pytest.raises(leasehold.NotHeldError, match="the lock is free") as refused:
        old.guard("DECRBY", stock, 1)
    assert isinstance(refused.value, leasehold.LockNotOwnedError), "caught as redis-py's too"
    assert number(r.get(stock)) == 7


def test_a_holding_lost_and_taken_again_by_the_same_owner_runs_nothing(r, name):
    stock = f"{name}:stock"
    r.set(stock, 10)
    old = leasehold.Lock(r, name, timeout=0.2)
    assert old.acquire(blocking=False, token="host-a")
    time.sleep(0.3)
    again = leasehold.Lock(r, name, timeout=10)
    assert again.acquire(blocking=False, token="host-a")
    assert again.fencing_token > old.fencing_token
    with pytest.raises(leasehold.NotHeldError, match=f"with token {again.fencing_token}, not"):
        old.guard("DECRBY", stock, 1)
    assert number(r.get(stock)) == 10
    assert again.guard("DECRBY", stock, 1) == 9
    again.release()


def test_a_smaller_token_is_refused_after_a_larger_one_wrote_through_the_fence(r, name):
    fence, stock = f"{name}:fence", f"{name}:stock"
    r.set(stock, 10)
    first = leasehold.Lock(r, name, timeout=0.2)
    assert first.acquire(blocking=False)
    time.sleep(0.3)
    second = leasehold.Lock(r, name, timeout=10)
    assert second.acquire(blocking=False)
    assert second.fenced(fence, "DECRBY", stock, 1) == 9
    with pytest.raises(leasehold.StaleTokenError, match="^STALE token") as refused:
        first.fenced(fence, "DECRBY", stock, 1)
    assert (refused.value.token, refused.value.largest) == (first.fencing_token, second.fencing_token)
    assert isinstance(refused.value, leasehold.LockError)
    assert number(r.get(stock)) == 9, "the stale write did not run"
    # A token from anywhere (another server's lock, Redlock): the same fence.
    assert leasehold.fenced(r, fence, second.fencing_token + 5, "SET", stock, "100") in (True, b"OK", "OK")
    with pytest.raises(leasehold.StaleTokenError):
        leasehold.fenced(r, fence, second.fencing_token, "SET", stock, "0")
    assert number(r.get(stock)) == 100
    second.release()


def test_the_packages_refusals_of_what_it_cannot_guard(r, name):
    lock = leasehold.Lock(r, name, timeout=10)
    with pytest.raises(leasehold.LockError, match="not held"):
        lock.guard("GET", "x")
    with pytest.raises(leasehold.LockError, match="not held"):
        lock.fenced(f"{name}:fence", "GET", "x")
    assert lock.acquire(blocking=False)
    with pytest.raises(leasehold.LockError, match="needs a command"):
        lock.guard()
    with pytest.raises(redis.ResponseError, match="cannot be guarded"):
        lock.guard("BLPOP", "x", 0)
    lock.release()
    both = leasehold.MultiLock(r, [f"{{{name}}}:a", f"{{{name}}}:b"], timeout=10)
    assert both.acquire(blocking=False)
    with pytest.raises(leasehold.LockError, match="MultiLock"):
        both.guard("GET", "x")
    both.release()


def test_syncing_off_sends_nosync_on_the_clients_own_connection(r, name):
    stock = f"{name}:stock"
    r.set(stock, 3)
    lock = leasehold.Lock(r, name, timeout=10, sync=leasehold.SYNC_OFF)
    assert lock.acquire(blocking=False)
    assert lock.guard("INCR", stock) == 4
    assert lock.fenced(f"{name}:fence", "INCR", stock) == 5
    lock.release()
    with pytest.raises(leasehold.NotHeldError):
        lock_was_held = leasehold.Lock(r, name, timeout=0.1, sync=leasehold.SYNC_OFF)
        assert lock_was_held.acquire(blocking=False)
        time.sleep(0.2)
        lock_was_held.guard("INCR", stock)
    assert number(r.get(stock)) == 5


def test_a_guarded_write_is_on_the_replica_when_it_returns_or_refused_when_not(replicated, name):
    master, replica = replicated
    r = redis.Redis(port=master.port)
    on_replica = redis.Redis(port=replica.port)
    stock = f"{name}:stock"
    r.set(stock, 10)
    lock = leasehold.Lock(r, name, timeout=10, sync=QUICK)
    assert lock.acquire(blocking=False)
    assert lock.guard("DECRBY", stock, 1) == 9
    assert on_replica.get(stock) == b"9", "already on the replica"
    assert lock.fenced(f"{name}:fence", "DECRBY", stock, 1) == 8
    assert on_replica.get(stock) == b"8"
    replica.signal(signal.SIGSTOP)
    try:
        with pytest.raises(leasehold.NotReplicatedError, match=ACKED_LATE) as refused:
            lock.guard("DECRBY", stock, 1)
        assert "the command ran here" in str(refused.value)
        assert r.get(stock) == b"7", "it ran on the master: a failover may lose it"
    finally:
        replica.signal(signal.SIGCONT)
    lock.release()


def test_a_guarded_write_the_master_cannot_count_raises_not_replicated():
    master, followers = group(1, ("min-insync-replicas", "2"))
    try:
        r = redis.Redis(port=master.port)
        name = "guarded"
        stock = f"{name}:stock"
        r.set(stock, 10)
        lock = leasehold.Lock(r, name, timeout=10, sync=leasehold.SYNC_OFF)
        assert lock.acquire(blocking=False), "a grant not synced counts at once"
        lock.sync = QUICK  # its guarded commands synced
        for run in (lambda: lock.guard("DECRBY", stock, 1),
                    lambda: leasehold.fenced(r, f"{name}:fence", 1, "DECRBY", stock, 1, sync=QUICK)):
            with pytest.raises(leasehold.NotReplicatedError, match="fewer than lock.min-insync-replicas") as refused:
                run()
            assert "the command ran here" in str(refused.value)
        assert r.get(stock) == b"8", "both ran on the master: a failover may lose them"
    finally:
        stop_all([master, *followers])


async def test_asyncio_guard_and_fenced(server, name):
    r = redis.asyncio.Redis.from_url(server.url)
    stock, fence = f"{name}:stock", f"{name}:fence"
    await r.set(stock, 10)
    old = leasehold.asyncio.Lock(r, name, timeout=0.2)
    assert await old.acquire(blocking=False)
    assert await old.guard("DECRBY", stock, 1) == 9
    assert await old.fenced(fence, "DECRBY", stock, 1) == 8
    time.sleep(0.3)
    new = leasehold.asyncio.Lock(r, name, timeout=10)
    assert await new.acquire(blocking=False)
    with pytest.raises(leasehold.NotHeldError):
        await old.guard("DECRBY", stock, 1)
    assert await new.fenced(fence, "DECRBY", stock, 1) == 7
    with pytest.raises(leasehold.StaleTokenError):
        await old.fenced(fence, "DECRBY", stock, 1)
    with pytest.raises(leasehold.StaleTokenError):
        await leasehold.asyncio.fenced(r, fence, old.fencing_token, "DECRBY", stock, 1)
    assert int(await r.get(stock)) == 7
    await new.release()
    await aclose(r)
