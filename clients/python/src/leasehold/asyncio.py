"""The lock classes of :mod:`leasehold` over ``redis.asyncio``: the same interface with
``await``, a drop-in for ``redis.asyncio.lock.Lock`` (``r.lock(name, lock_class=...)``); the
watchdog is a task and :attr:`Lock.lost` an ``asyncio.Event``. The pools of dedicated
connections are ``redis.asyncio``'s (:func:`configure_pools`); close them with ``await
close_pools(r)`` before the event loop ends."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Set, Tuple, Type

import redis.asyncio
from redis.exceptions import (
    AskError,
    ConnectionError,
    LockError,
    LockNotOwnedError,
    MovedError,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from ._outbox import Outbox, Queued, State
from ._pools import (
    QUEUE_BUDGET,
    QUEUE_SLACK,
    Budgeted,
    Master,
    Pools,
    borrow_args,
    configure_pools,
    pools_of,
    redirected,
)
from ._protocol import (
    REDIRECTS,
    TRY_AGAIN_DELAY,
    Grant,
    Lease,
    LockBase,
    NotReplicatedError,
    Number,
    Pipeline,
    QueuedOut,
    Seen,
    SetOf,
    TaskLocal,
    Write,
    deadline_of,
    hinted,
    is_cluster,
    least_lease_ms,
    new_owner,
    time_left,
    to_ms,
)

if sys.version_info >= (3, 11, 3):
    from asyncio import timeout_at
else:  # what redis-py itself uses there (its dependency)
    from async_timeout import timeout_at


class BudgetedPool(Budgeted, redis.asyncio.BlockingConnectionPool):
    """A wait or sync pool: ``redis.asyncio``'s ``BlockingConnectionPool``, each caller
    queueing within its own budget."""


#: What ``BudgetedPool.get_connection`` takes on this redis-py.
BORROW_ARGS = borrow_args(redis.asyncio.BlockingConnectionPool)


__all__ = ["Lock", "MultiLock", "ReadWriteLock", "Semaphore", "SharedLock", "close_pools",
           "configure_pools"]


async def close_pools(redis: Any) -> None:
    """Closes the dedicated connections the lock classes keep beside ``redis`` (its wait and
    sync pools, see :func:`leasehold.configure_pools`): call it with ``await
    redis.aclose()``, before the event loop ends. A lock used on ``redis`` afterwards makes
    new pools; what was seen of the masters is kept."""
    for pool in pools_of(redis).drain():
        await pool.disconnect()


async def borrow(pool: BudgetedPool, deadline: Optional[float], wanted: int) -> Any:
    """As :func:`leasehold.lock.borrow`."""
    token = QUEUE_BUDGET.set(time_left(deadline))
    try:
        return await pool.get_connection(*BORROW_ARGS)
    except ConnectionError:
        if deadline is not None and time.monotonic() >= deadline - QUEUE_SLACK:
            raise QueuedOut(wanted) from None
        raise
    finally:
        QUEUE_BUDGET.reset(token)


@asynccontextmanager
async def lent(pool: BudgetedPool, connection: Any) -> AsyncIterator[Any]:
    """As :func:`leasehold.lock.lent`: closed before it goes back if the block raised or was
    cancelled."""
    try:
        yield connection
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)


@asynccontextmanager
async def borrowed(pool: BudgetedPool, deadline: Optional[float], wanted: int) -> AsyncIterator[Any]:
    """As :func:`leasehold.lock.borrowed`."""
    async with lent(pool, await borrow(pool, deadline, wanted)) as connection:
        yield connection


async def exchange(connection: Any, pipeline: Pipeline, until: Optional[float]) -> None:
    """As :func:`leasehold.lock.exchange`."""
    pipeline.take(await send(connection, pipeline.commands(), pipeline.within(), until))
    again = pipeline.again()
    if again is not None:
        commands, within = again
        pipeline.take_again(await send(connection, commands, within, until))
    pipeline.settle()


async def send_rounds(connection: Any, outbox: Outbox) -> None:
    """As :func:`leasehold.lock.send_rounds`, until nothing is queued."""
    while True:
        batch = outbox.take()
        if not batch:
            return
        try:
            await exchange(connection, outbox.pipeline(batch), None)
        except BaseException as error:  # cancelled too: the others still hear of it
            outbox.deliver(batch, error)
            outbox.stop()
            raise
        outbox.deliver(batch)


#: The tasks sending synced writes (a running task needs a reference kept).
_SENDERS: Set["asyncio.Task[None]"] = set()


def send_in_task(pool: BudgetedPool, connection: Any, outbox: Outbox) -> None:
    """Sends the writes queued in ``outbox`` on ``connection`` (:func:`send_rounds`) in a task
    of its own, so that cancelling the caller that borrowed it loses no other caller's outcome;
    then gives the connection back (closed if a round trip was lost)."""

    async def drain() -> None:
        try:
            async with lent(pool, connection):
                await send_rounds(connection, outbox)
        except Exception:
            pass  # told to the writes of the round trip as their lost reply

    task = asyncio.ensure_future(drain())
    _SENDERS.add(task)
    task.add_done_callback(_SENDERS.discard)


async def woken(queued: Queued, deadline: Optional[float]) -> bool:
    """Waits until ``queued``'s caller is woken (its outcome came, or a sender's place) or
    ``deadline`` (``time.monotonic()`` seconds; ``None``: no limit) passes; whether it was."""
    try:
        async with timeout_at(on_loop_clock(deadline)):
            await queued.woken.wait()
        return True
    except asyncio.TimeoutError:
        return False


def on_loop_clock(deadline: Optional[float]) -> Optional[float]:
    """``deadline`` (``time.monotonic()`` seconds) on the running loop's clock."""
    if deadline is None:
        return None
    return deadline + asyncio.get_running_loop().time() - time.monotonic()


async def send(
    connection: Any, commands: List[List[Any]], within: Optional[float], until: Optional[float]
) -> List[Tuple[Any, float]]:
    """As :func:`leasehold.lock.send`; the connection's socket timeout does not apply."""
    deadline = on_loop_clock(deadline_of(within, until))
    await connection.send_packed_command(connection.pack_commands(commands))
    try:
        async with timeout_at(deadline):
            return [await read(connection) for _ in commands]
    except asyncio.TimeoutError:
        raise TimeoutError("no reply in time; the connection is closed") from None


async def read(connection: Any) -> Tuple[Any, float]:
    """The next reply (an error reply as its exception), with when it was read."""
    try:
        reply = await connection.read_response(timeout=math.inf)
    except ResponseError as error:
        reply = error
    return reply, time.monotonic()


class Lock(LockBase):
    """:class:`leasehold.Lock` for ``redis.asyncio`` clients; see it for the differences from
    redis-py's lock. With ``thread_local=True`` (the default) each asyncio task keeps its own
    holding, so tasks sharing one lock object exclude each other (redis-py's asyncio lock keeps
    it per thread, which every task of the loop shares): release a holding from the task that
    acquired it, or pass ``thread_local=False`` to share one holding between tasks."""

    holder_state = TaskLocal

    async def __aenter__(self) -> "Lock":
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError as error:
            self._released_on_exit(error)

    @property
    def lost(self) -> asyncio.Event:
        """Set once the current holding's lease is known lost."""
        keeper = self.local.keeper
        return keeper.lost if keeper is not None else asyncio.Event()

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Any] = None,
    ) -> bool:
        """Takes the lock; ``True`` once held (see :meth:`leasehold.Lock.acquire`)."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        owner = self.redis.get_encoder().encode(token if token is not None else new_owner())
        if blocking:
            grant = await self._wait(owner, blocking_timeout)
        else:
            grant = await self._try(owner)
        if grant is None:
            return False
        self._held(owner, grant)
        if self.watchdog:
            lease = self.local.lease
            self.local.keeper = Keeper(lambda ms, until: self._renew(owner, ms, lease, until),
                                       self._lease_ms(), lease)
        return True

    async def release(self) -> None:
        """Releases the lock (not synced). ``LockNotOwnedError`` when its lease had run out."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.")
        self._forget()
        if not self._whole(await self.redis.execute_command(*self._command("RELEASE", owner))):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned")

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Adds ``additional_time`` seconds to the lease left, or replaces it; synced (see
        :meth:`leasehold.Lock.extend`)."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot extend an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout")
        lease_ms = to_ms(additional_time, "additional_time")
        if not replace_ttl:
            infos = [await self.redis.execute_command("LOCK.INFO", key) for key in self._keys()]
            left = least_lease_ms(infos, owner)
            if left is None:
                raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
            lease_ms += max(left, 0)
        if not await self._renew(owner, lease_ms, self.local.lease):
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
        return True

    async def reacquire(self) -> bool:
        """Resets the lease to ``timeout``; synced (see :meth:`leasehold.Lock.reacquire`)."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        if not await self._renew(owner, self._lease_ms(), self.local.lease):
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned")
        return True

    async def locked(self) -> bool:
        """True if anyone holds the lock."""
        return any([await self.redis.execute_command("LOCK.FENCE", key) is not None
                    for key in self._keys()])

    async def owned(self) -> bool:
        """True if this lock holds it."""
        owner = self.local.token
        if owner is None:
            return False
        return all([await self.redis.execute_command("LOCK.FENCE", key, owner) is not None
                    for key in self._keys()])

    async def _try(self, owner: Any) -> Optional[Grant]:
        try:
            if self.sync.off:
                sent = time.monotonic()
                reply = await self.redis.execute_command(*self._acquire_command(owner))
                return None if reply is None else Grant(reply, sent)
            return await self._kept(owner, await self._synced(self._grant_write(owner)))
        except TryAgainError:
            return None

    async def _wait(self, owner: Any, blocking_timeout: Optional[Number]) -> Optional[Grant]:
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return await self._try(owner)
            try:
                return await self._kept(owner, await self._waited(owner, deadline))
            except QueuedOut:
                return None
            except TryAgainError:
                await asyncio.sleep(TRY_AGAIN_DELAY)
            except NotReplicatedError:
                if deadline is None or time.monotonic() >= deadline:
                    raise
            except (TimeoutError, ConnectionError):
                granted = await self._recover(owner)
                if granted is not None:
                    return granted

    async def _kept(self, owner: Any, write: Write) -> Optional[Grant]:
        """As :meth:`leasehold.Lock._kept`."""
        reply = write.outcome()
        if reply is None:
            return None
        unkept = self._unkept(write)
        if unkept is not None:
            await self.redis.execute_command(*self._command("RELEASE", owner))
            raise unkept
        return Grant(reply, write.started)

    async def _waited(self, owner: Any, deadline: Optional[float]) -> Write:
        """As :meth:`leasehold.Lock._waited`."""
        return await self._routed(lambda master, asking: self._alone(
            "wait", master, deadline,
            lambda seen: self._wait_pipeline(owner, seen, asking, deadline)))

    async def _synced(self, write: Write) -> Write:
        """As :meth:`leasehold.Lock._synced`."""
        deadline = self._sync_deadline(write.until)
        try:
            return await self._routed(
                lambda master, asking: self._synced_to(master, asking, write, deadline))
        except QueuedOut as queued:
            raise queued.not_replicated() from None

    async def _synced_to(self, master: Master, asking: bool, write: Write, deadline: float) -> Write:
        """As :meth:`leasehold.Lock._synced_to`."""
        if not asking:
            return await self._together(master, write, deadline)
        return await self._alone(
            "sync", master, deadline,
            lambda seen: Pipeline([write], sync=self.sync, seen=seen, asking=True),
            write.until)

    async def _routed(self, send: Callable[[Master, bool], Awaitable[Write]]) -> Write:
        """As :meth:`leasehold.Lock._routed`."""
        redirect = None
        for _ in range(REDIRECTS):
            write = await send(await self._master(redirect), redirect is not None)
            if isinstance(write.reply, MovedError):
                redirect = None
                await self.redis.nodes_manager.initialize()
            elif isinstance(write.reply, AskError):
                redirect = (write.reply.host, int(write.reply.port))
            else:
                return write
        raise TryAgainError("the lock's slot kept moving")

    async def _alone(
        self,
        kind: str,
        master: Master,
        deadline: Optional[float],
        build: Callable[[Seen], Pipeline],
        until: Optional[float] = None,
    ) -> Write:
        """As :meth:`leasehold.Lock._alone`."""
        pools = pools_of(self.redis)
        seen = pools.seen(master)
        pool = pools.pool(kind, master, BudgetedPool)
        async with borrowed(pool, deadline, hinted(self.sync, seen)) as connection:
            pipeline = build(seen)
            await exchange(connection, pipeline, until)
        return pipeline.writes[0]

    async def _together(self, master: Master, write: Write, deadline: float) -> Write:
        """As :meth:`leasehold.Lock._together`; a caller cancelled while its write is queued
        withdraws it, and one cancelled after loses only its own outcome."""
        pools = pools_of(self.redis)
        outbox = pools.outbox(master)
        queued = outbox.queue(write, self.sync, asyncio.Event())
        try:
            while not queued.done:
                if outbox.start(queued):
                    await self._send_queued(pools, master, outbox, queued, deadline)
                elif not await woken(queued, None if queued.state is State.TAKEN else deadline):
                    if outbox.withdraw(queued):
                        raise QueuedOut(hinted(self.sync, outbox.seen))
        finally:
            outbox.withdraw(queued)
        if queued.error is not None:
            raise queued.error
        return write

    async def _send_queued(
        self, pools: Pools, master: Master, outbox: Outbox, queued: Queued, deadline: float
    ) -> None:
        """As a sender: borrows a sync connection, queueing until ``deadline``, and sends the
        writes queued on it in a task of its own (:func:`send_in_task`) until none is left.
        When none could be borrowed the place goes on, and the error is raised if the own write
        was still queued."""
        pool = pools.pool("sync", master, BudgetedPool)
        try:
            connection = await borrow(pool, deadline, hinted(self.sync, outbox.seen))
        except BaseException as error:
            if outbox.give_up(queued) or not isinstance(error, Exception):
                raise
            return  # another sender took the write: its outcome comes
        send_in_task(pool, connection, outbox)

    async def _master(self, redirect: Optional[Tuple[str, int]] = None) -> Master:
        """The server, or the master of the lock's slot in a ``RedisCluster`` (which learns its
        slots at its first command), or the one an ``ASK`` named."""
        if not is_cluster(self.redis):
            pool = self.redis.connection_pool
            return Master(None, pool.connection_class, pool.connection_kwargs)
        await self.redis.initialize()
        node = self.redis.get_node_from_key(self.name)
        master = Master(node.name, node.connection_class, node.connection_kwargs)
        return master if redirect is None else redirected(master, *redirect)

    async def _recover(self, owner: Any) -> Optional[Grant]:
        try:
            return await self._try(owner)
        except RedisError:
            asyncio.ensure_future(self._release_eventually(owner))
            raise

    async def _release_eventually(self, owner: Any) -> None:
        for attempt in range(20):
            try:
                await self.redis.execute_command(*self._command("RELEASE", owner))
                return
            except RedisError:
                await asyncio.sleep(min(0.01 * 2**attempt, 1.0))

    async def _renew(
        self, owner: Any, lease_ms: int, lease: Lease, until: Optional[float] = None
    ) -> bool:
        """As :meth:`leasehold.Lock._renew`."""
        write = self._renew_write(owner, lease_ms, until)
        try:
            if self.sync.off:
                reply = await self.redis.execute_command(*self._command("RENEW", owner, lease_ms))
                return self._whole(reply) and self._counted(lease, write.started, lease_ms)
            write = await self._synced(write)
        except Exception:
            self._unsure(lease, write.started, lease_ms)
            raise
        return self._renewal_counts(write, lease, lease_ms)


class Keeper:
    """The watchdog as a task (see :class:`leasehold.lock.Keeper`): renews every third of the
    lease until stopped or refused; sets :attr:`lost` when the last synced lease ends first."""

    def __init__(
        self, renew: Callable[[int, float], Awaitable[bool]], lease_ms: int, lease: Lease
    ) -> None:
        self.lost = asyncio.Event()
        self._renew = renew
        self._lease_ms = lease_ms
        self._lease = lease
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        """Stops renewing (at release); a renewal in flight is cancelled, its connection closed."""
        self._task.cancel()

    async def _run(self) -> None:
        period = self._lease_ms / 3000
        renew_at = time.monotonic() + period
        while True:
            await asyncio.sleep(max(min(renew_at, self._lease.end) - time.monotonic(), 0))
            now = time.monotonic()
            if now >= self._lease.end:
                break
            if now < renew_at:
                continue
            renew_at = now + period
            try:
                if not await self._renew(self._lease_ms, self._lease.end):
                    break
            except RedisError:
                continue  # not synced, or no reply: try again while the lease lasts
        self.lost.set()


class MultiLock(SetOf, Lock):
    """:class:`leasehold.MultiLock` over ``redis.asyncio``."""


class SharedLock(Lock):
    """A reader of a :class:`ReadWriteLock` (``SHARED``)."""

    mode = ("SHARED",)


class ReadWriteLock:
    """:class:`leasehold.ReadWriteLock` over ``redis.asyncio``."""

    def __init__(self, redis: Any, name: Any, **kwargs: Any) -> None:
        self.read = SharedLock(redis, name, **kwargs)
        self.write = Lock(redis, name, **kwargs)


class Semaphore(Lock):
    """:class:`leasehold.Semaphore` over ``redis.asyncio``."""

    def __init__(self, redis: Any, name: Any, permits: int, **kwargs: Any) -> None:
        super().__init__(redis, name, **kwargs)
        self.permits = permits
        self.mode = ("SHARED", "LIMIT", permits)
