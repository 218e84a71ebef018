"""A network blip, sync and asyncio, on every redis-py version tested: every client connection to
the server closed once (``CLIENT KILL TYPE normal`` from an admin connection), as a flapping
link or a proxy restart does. A holder with the watchdog and its session (the package's
defaults) and a waiter on one lock: for the server's session grace after the blip and more, the
holder is not told it lost the lock, the waiter is not granted it, and the server still has the
holding — same owner, fencing token and session; released, the lock goes to the waiter."""

import asyncio
import time

import pytest
import redis
import redis.asyncio

import leasehold.asyncio
from conftest import Waiter, aclose, holding, wait_until, waiters

#: A server of its own for each test: the blip closes only its connections.
pytestmark = [pytest.mark.own_server, pytest.mark.every_redis_py]

#: The holder's lease, in seconds: the watchdog renews it every second, so renewals go on pooled
#: connections the blip closed, and the lease would end within the check if they failed.
LEASE = 3

#: How long after the blip nothing may change, in seconds: the server's session grace (the
#: module's default, 3 s, which the clients keep) and half a second for its sweep.
UNCHANGED_FOR = 3.5


def blip(admin) -> None:
    """Closes every client connection but ``admin``'s — at least the holder's session and sync
    connections and the waiter's session and wait connections."""
    killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal")
    assert killed >= 4, f"{killed} connections closed"


def unchanged(admin, name, held, lost, stopped_waiting: bool) -> None:
    """Fails unless the holder still holds ``name`` as ``held`` and is not told ``lost``, and
    the waiter is still waiting."""
    assert not lost.is_set(), "the holder was told it lost the lock"
    assert not stopped_waiting, "the waiter stopped waiting (granted, or failed)"
    assert holding(admin, name) == held, "the holding changed"


def test_a_blip_leaves_the_holder_its_lock_and_the_waiter_waiting(server, admin, name):
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=LEASE, watchdog=True)
    assert holder.acquire()
    held = holding(admin, name)
    assert held.session is not None and held.token == holder.fencing_token
    waiter = Waiter(redis.Redis(port=server.port), name)
    wait_until(lambda: waiters(admin, name) == 1)
    blip(admin)
    until = time.monotonic() + UNCHANGED_FOR
    while time.monotonic() < until:
        unchanged(admin, name, held, holder.lost, not waiter.thread.is_alive())
        time.sleep(0.05)
    assert holder.lease_end > time.monotonic(), "renewed since"
    holder.release()
    waiter.join()
    assert waiter.lock.fencing_token > held.token
    waiter.lock.release()
    for lock in (holder, waiter.lock):
        leasehold.close_pools(lock.redis)


async def test_asyncio_a_blip_leaves_the_holder_its_lock_and_the_waiter_waiting(
        server, admin, name):
    holder = leasehold.asyncio.Lock(redis.asyncio.Redis(port=server.port), name, timeout=LEASE,
                                    watchdog=True)
    assert await holder.acquire()
    held = holding(admin, name)
    assert held.session is not None and held.token == holder.fencing_token
    waiter = leasehold.asyncio.Lock(redis.asyncio.Redis(port=server.port), name, timeout=30,
                                    blocking_timeout=10, thread_local=False)
    waiting = asyncio.ensure_future(waiter.acquire())
    while waiters(admin, name) != 1:
        await asyncio.sleep(0.01)
    blip(admin)
    until = time.monotonic() + UNCHANGED_FOR
    while time.monotonic() < until:
        unchanged(admin, name, held, holder.lost, waiting.done())
        await asyncio.sleep(0.05)
    assert holder.lease_end > time.monotonic(), "renewed since"
    await holder.release()
    assert await waiting and waiter.fencing_token > held.token
    await waiter.release()
    for lock in (holder, waiter):
        await aclose(lock.redis)
