"""The lock classes of :mod:`leasehold` over ``redis.asyncio``: the same interface with
``await``, a drop-in for ``redis.asyncio.lock.Lock`` (``r.lock(name, lock_class=...)``); the
watchdog is a task and :attr:`Lock.lost` an ``asyncio.Event``. The pools of dedicated
connections are ``redis.asyncio``'s (:func:`configure_pools`); close them with ``await
close_pools(r)`` before the event loop ends."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import math
import os
import sys
import time
import weakref
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Deque, List, Optional, Set, Tuple, Type

import redis.asyncio
import redis.asyncio as redis_asyncio
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

from ._pools import (
    IDLE_CHECK,
    QUEUE_BUDGET,
    QUEUE_SLACK,
    Master,
    configure_pools,
    configure_sessions,
    pooled_connection_kwargs,
    pools_of,
    redirected,
    session_connection_kwargs,
)
from ._protocol import (
    DEFAULT_LEASE,
    Batch,
    Batches,
    Queued,
    REDIRECTS,
    WAIT_MARGIN,
    TRY_AGAIN_DELAY,
    Binding,
    Grant,
    Lease,
    LockBase,
    NotReplicatedError,
    Number,
    Pipeline,
    QueuedOut,
    Renewals,
    SessionSettings,
    SessionState,
    SetOf,
    Sync,
    TaskLocal,
    Term,
    Write,
    binding_of,
    deadline_of,
    fenced_command,
    guarded_reply,
    is_cluster,
    least_lease_ms,
    logger,
    new_owner,
    no_such_session,
    open_command,
    opened,
    record_binding,
    round_trip,
    session_setup,
    time_left,
    to_ms,
    unknown_command,
    writing,
)
from .election import (
    OBSERVE_BLOCK,
    Campaigning,
    ElectionBase,
    ElectionState,
    LeadershipBase,
    Value,
    observe_command,
    observe_wait,
    state_of,
)

if sys.version_info >= (3, 11, 3):
    from asyncio import timeout_at
else:  # what redis-py itself uses there (its dependency)
    from async_timeout import timeout_at


class BudgetedPool:
    """A wait or sync pool of ``redis.asyncio`` connections to one master: at most
    ``max_connections`` open, each lent to one caller at a time; a caller that finds them all
    lent queues, first come first served, within its own budget (:data:`QUEUE_BUDGET`) and then
    gets redis-py's ``ConnectionError``. A connection comes back closed when its reply was lost
    (:meth:`Lock._alone`), and connects again when next lent. Lighter than ``redis.asyncio``'s
    ``BlockingConnectionPool``: with 64 tasks its condition, its timeout and its metrics were
    about a fifth of the package's time per acquire + release (the sync classes have their own
    too, :class:`leasehold.lock.BudgetedPool`)."""

    def __init__(self, max_connections: int, connection_class: Any, **connection_kwargs: Any) -> None:
        self.max_connections = max_connections
        self.connection_class = connection_class
        # No socket timeout: each round trip, its write included, is bounded by its caller
        # (:func:`send`), and redis-py wraps every write in a task under one (``wait_for``),
        # which was a twentieth of an acquire with 64 tasks.
        self.connection_kwargs = {**connection_kwargs, "socket_timeout": None}
        #: Connections lent or idle, to close on :meth:`disconnect`.
        self._open: Set[Any] = set()
        #: Idle connections with when each came back, the last one first to go out again.
        self._idle: List[Tuple[Any, float]] = []
        #: Callers queued for a connection, first come first served.
        self._queue: Deque["asyncio.Future[Any]"] = collections.deque()

    async def get_connection(self) -> Any:
        """A connection, connected: an idle one, a new one while fewer than ``max_connections``
        are open, or the next one given back, queued for up to the caller's budget."""
        if self._idle:
            connection, since = self._idle.pop()
        elif len(self._open) < self.max_connections:
            connection, since = self.connection_class(**self.connection_kwargs), None
            self._open.add(connection)
        else:
            connection, since = await self._queued(QUEUE_BUDGET.get()), None
        try:
            if since is not None and time.monotonic() - since >= IDLE_CHECK:
                await ensure_connected(connection)
            else:
                await connection.connect()
        except BaseException:
            self._open.discard(connection)
            await connection.disconnect()
            self._serve_queue()
            raise
        return connection

    async def _queued(self, budget: Optional[float]) -> Any:
        """The next connection given back (or room for a new one), within ``budget`` seconds."""
        loop = asyncio.get_running_loop()
        waiter: "asyncio.Future[Any]" = loop.create_future()
        self._queue.append(waiter)
        # A timer rather than a timeout around the await: lighter, and queueing is the common
        # case with more tasks than connections.
        expiry = None if budget is None else loop.call_at(loop.time() + budget, queued_out, waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed one just as the caller was cancelled: it goes on.
                self._give_back(waiter.result())
            raise
        finally:
            if expiry is not None:
                expiry.cancel()
            if not waiter.done():
                waiter.cancel()

    async def release(self, connection: Any) -> None:
        """Takes back a lent connection: to the first caller queued, or idle. One lent before
        :meth:`disconnect` is closed, and a caller still queued gets a new one in its place."""
        if connection not in self._open:
            await connection.disconnect()
            self._serve_queue()
            return
        self._give_back(connection)

    def _give_back(self, connection: Any) -> None:
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._idle.append((connection, time.monotonic()))

    def _serve_queue(self) -> None:
        """Lets a queued caller open a connection in place of one that failed to connect."""
        while self._queue and len(self._open) < self.max_connections:
            waiter = self._queue.popleft()
            if not waiter.done():
                connection = self.connection_class(**self.connection_kwargs)
                self._open.add(connection)
                waiter.set_result(connection)

    async def disconnect(self) -> None:
        """Closes every connection, idle now and lent ones as they come back."""
        connections, self._idle = list(self._open), []
        self._open.clear()
        for connection in connections:
            await connection.disconnect()


def queued_out(waiter: "asyncio.Future[Any]") -> None:
    """A queued caller's budget ran out: redis-py's error for it, as its pools raise."""
    if not waiter.done():
        waiter.set_exception(ConnectionError("No connection available."))


async def ensure_connected(connection: Any) -> None:
    """Connects ``connection`` again if the server closed it, or left data unread on it."""
    await connection.connect()
    try:
        if await connection.can_read_destructive():
            raise ConnectionError("Connection has data")
    except (ConnectionError, TimeoutError, OSError):
        await connection.disconnect()
        await connection.connect()


__all__ = ["Election", "ElectionState", "Leadership", "Lock", "MultiLock", "ReadWriteLock",
           "Semaphore", "SharedLock", "close_pools", "configure_pools", "configure_sessions",
           "fenced"]


async def close_pools(redis: Any) -> None:
    """Closes the dedicated connections the lock classes keep beside ``redis`` (its wait and
    sync pools, see :func:`leasehold.configure_pools`) and ends its sessions (see
    :func:`leasehold.close_pools`): call it with ``await redis.aclose()``, before the event
    loop ends. A lock used on ``redis`` afterwards makes new pools and a new session."""
    pools, sessions = pools_of(redis).drain()
    for session in sessions:
        await session.close()
    for pool in pools:
        await pool.disconnect()


async def fenced(redis: Any, fence: Any, token: int, *command: Any, sync: Sync = Sync()) -> Any:
    """As :func:`leasehold.fenced`, for ``redis.asyncio``: ``await
    leasehold.asyncio.fenced(r, "fence:stock:42", token, "DECRBY", "stock:42", 1)``."""
    lock = Lock(redis, fence, sync=sync)
    return await lock._run_synced(fence, fenced_command(fence, token, sync, command))


async def borrow(pool: BudgetedPool, deadline: Optional[float]) -> Any:
    """As :func:`leasehold.lock.borrow`."""
    token = QUEUE_BUDGET.set(time_left(deadline))
    try:
        return await pool.get_connection()
    except ConnectionError:
        if deadline is not None and time.monotonic() >= deadline - QUEUE_SLACK:
            raise QueuedOut() from None
        raise
    finally:
        QUEUE_BUDGET.reset(token)


async def exchange(
    connection: Any, pipeline: Pipeline, until: Optional[float], keep_binding: bool = False
) -> None:
    """As :func:`leasehold.lock.exchange`: bound to the current session with ``LOCK.SESSION
    USE`` in the same round trip, closed first when bound and a write is tied to none."""
    if not keep_binding:
        binding = binding_of(connection, socket_of(connection))
        if binding.id is not None and pipeline.untied():
            await connection.disconnect()
            binding = Binding(None)
        pipeline.on(binding)
    pipeline.take(await send(connection, pipeline.commands(), pipeline.within(), until))
    if not keep_binding:
        record_binding(connection, pipeline.binding_after(binding, socket_of(connection)))
    pipeline.settle()


def socket_of(connection: Any) -> Any:
    """The stream ``connection`` writes to now; ``None`` when not connected."""
    return getattr(connection, "_writer", None)


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
    packed = connection.pack_commands(commands)
    try:
        # The write too: a pool's connections have no socket timeout of their own.
        async with timeout_at(deadline):
            await send_packed(connection, packed)
            return [await read(connection) for _ in commands]
    except asyncio.TimeoutError:
        raise TimeoutError("no reply in time; the connection is closed") from None


#: How many cancellations of the task were pending (:func:`cancel_requests`) when its lock call
#: began (:meth:`Lock._routed`).
CANCELS_BEFORE: contextvars.ContextVar[int] = contextvars.ContextVar("cancels_before", default=0)


def cancel_requests() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling``, Python
    3.11+; always 0 before)."""
    counted = getattr(asyncio.current_task(), "cancelling", None)
    return counted() if counted is not None else 0


async def send_packed(connection: Any, packed: Any) -> None:
    """``connection.send_packed_command(packed)``, raising a cancellation redis-py lost. It
    connects and writes under ``asyncio.wait_for``, which before Python 3.12 returns as if
    nothing happened when its caller is cancelled just as the awaited step completes (CPython
    gh-86296): a cancelled blocking acquire would go on waiting. Python 3.11's task still counts
    the request (``Task.cancelling``): one made since the lock call began (:data:`CANCELS_BEFORE`)
    is raised here, before the replies are awaited. 3.9 and 3.10 keep no trace of it."""
    await connection.send_packed_command(packed)
    if cancel_requests() > CANCELS_BEFORE.get():
        raise asyncio.CancelledError()


async def read(connection: Any) -> Tuple[Any, float]:
    """The next reply (an error reply as its exception), with when it was read."""
    try:
        reply = await connection.read_response(timeout=math.inf)
    except ResponseError as error:
        reply = error
    return reply, time.monotonic()


#: The batch senders and background releases running (a running task needs a reference kept).
_BACKGROUND: Set["asyncio.Task[None]"] = set()


def in_background(coroutine: Any) -> None:
    """Runs ``coroutine`` as a task of the running loop, kept until it ends."""
    task = asyncio.ensure_future(coroutine)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def release_eventually(redis: Any, release: List[Any]) -> None:
    """Sends ``release`` (a release as a holding's owner) on ``redis`` until the server answers
    it: 20 tries, backing off."""
    for attempt in range(20):
        try:
            await redis.execute_command(*release)
            return
        except RedisError:
            await asyncio.sleep(min(0.01 * 2**attempt, 1.0))


async def batched(redis: Any, master: Master, write: Write, sync: Sync, deadline: float) -> Write:
    """As :func:`leasehold.lock.batched`, for ``redis.asyncio``: the caller that starts a
    sender sends its write itself when it goes alone; a cancelled caller takes its write back
    if no batch took it, and a grant a batch made for it is released."""
    pools = pools_of(redis)
    queue = pools.batches(master, write.term is None, sync.off)
    loop = asyncio.get_running_loop()
    queued = Queued(write, sync, loop.create_future())
    try:
        if queue.push(queued) and await lead(redis, pools.pool("sync", master, BudgetedPool),
                                             queue, queued, deadline):
            return write
        # Timers rather than a timeout around the await (see BudgetedPool._queued): the write's
        # deadline to be taken, and the time by which its reply must come (a watchdog's
        # renewal: its lease's end, when it is reported lost rather than wait on).
        expiry = loop.call_at(on_loop_clock(deadline), withdrawn, queue, queued)
        late = None if write.until is None else loop.call_at(on_loop_clock(write.until),
                                                             too_late, queued)
        try:
            await queued.waiter
        finally:
            expiry.cancel()
            if late is not None:
                late.cancel()
    except BaseException:
        queue.withdraw(queued)
        raise
    return write


def withdrawn(queue: Batches, queued: Queued) -> None:
    """A write's sync timeout ran out: taken back, if no batch took it, with :class:`QueuedOut`
    (nothing was sent)."""
    if queue.withdraw(queued) and not queued.waiter.done():
        queued.waiter.set_exception(QueuedOut())


def too_late(queued: Queued) -> None:
    """A write's reply did not come by its ``until``: its caller stops waiting, as for a reply
    lost (a batch that carries it goes on; a grant it makes is released, its caller gone)."""
    if not queued.waiter.done():
        queued.waiter.set_exception(TimeoutError("no reply in time"))


async def lead(redis: Any, pool: BudgetedPool, queue: Batches, queued: Queued,
               deadline: float) -> bool:
    """The caller whose write started a sender: borrows a sync connection by ``deadline``;
    ``True`` once it sent its own write alone (``SYNC``, no task between it and its reply: a
    cancelled or failed round trip closes the connection, and the server releases a grant it
    still held); when others joined, a sender in the background sends them all (``False``:
    the caller waits for its outcome), and carries on with the writes that queued meanwhile."""
    try:
        connection = await borrow(pool, deadline)
    except (QueuedOut, ConnectionError):
        # The role goes to a sender in the background, which waits as long as it takes (or
        # hands the writes the error); the caller takes its own write back, unless the other
        # sender took it meanwhile.
        taken_back = queue.withdraw(queued)
        in_background(send_batches(redis, pool, queue, None, []))
        if taken_back:
            raise
        return False
    except BaseException:
        in_background(send_batches(redis, pool, queue, None, []))
        raise
    writes = queue.take()
    if not writes:  # the other sender took them all: this role ended there
        await pool.release(connection)
        return False
    if len(writes) > 1 or writes[0] is not queued:
        in_background(send_batches(redis, pool, queue, connection, writes))
        return False
    try:
        await exchange(connection, Pipeline(queued.write, sync=queued.sync), queued.write.until)
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        more = queue.take()
        if more:
            in_background(send_batches(redis, pool, queue, connection, more))
        else:
            await pool.release(connection)
    return True


async def send_batches(redis: Any, pool: BudgetedPool, queue: Batches, connection: Any,
                       writes: List[Queued]) -> None:
    """A sender in the background (a task): on ``connection`` (or one it borrows first, as
    long as that takes), ``writes`` first, then the writes waiting each time a batch is
    answered, until none waits. No connection to be had: the writes waiting get the error."""
    try:
        while True:
            if connection is None:
                try:
                    connection = await borrow(pool, None)
                except Exception as error:
                    # No connection to be had: every write waiting gets the error, the role ends.
                    for one in [*writes, *queue.stop()]:
                        answer(redis, one, error)
                    return
            if not writes:
                writes = queue.take()
                if not writes:
                    return
            sent, writes = writes, []
            if not await sync_batch(redis, connection, sent):
                await pool.release(connection)  # closed: the pool dials anew
                connection = None
    except BaseException:
        # Cancelled (the event loop ends): the callers waiting go too, and the role ends.
        for one in [*writes, *queue.stop()]:
            one.waiter.cancel()
        raise
    finally:
        if connection is not None:
            await pool.release(connection)


async def sync_batch(redis: Any, connection: Any, writes: List[Queued]) -> bool:
    """One round trip of a sender: as :func:`leasehold.lock.sync_batch`, a round trip of
    :func:`leasehold._protocol.round_trip`; gives back what a refused batch made,
    and hands each caller its outcome. ``False`` when the connection was closed: the replies
    were lost — each caller gets the error, and a grant it may have made is released in the
    background."""
    sent, until = round_trip(writes)
    try:
        await exchange(connection, sent, until)
    except BaseException as error:
        await connection.disconnect()
        for one in writes:
            if one.release is not None:
                in_background(release_eventually(redis, one.release))
            if isinstance(error, Exception):
                answer(redis, one, error)
            else:
                one.waiter.cancel()
        if not isinstance(error, Exception):
            raise
        return False
    refused = sent.refused() if isinstance(sent, Batch) else []
    for one in writes:
        if one not in refused:
            answer(redis, one)
    return not refused or await give_back(redis, connection, sent)


async def give_back(redis: Any, connection: Any, batch: Batch) -> bool:
    """Gives back what ``batch`` made before its refused ``LOCK.SYNC``, as the server gives
    back a refused ``SYNC`` write — each grant released by its owner on ``connection`` (in the
    background when that fails), a renewal not counted — then tells their callers
    (:meth:`Batch.given_back`). ``False`` when the connection was closed."""
    releases, replies, usable = batch.releases(), [], True
    if releases:
        try:
            replies = [reply for reply, _ in await send(connection, releases, WAIT_MARGIN, None)]
        except Exception:
            await connection.disconnect()
            usable = False
    for queued, error, later in batch.given_back(replies):
        if later is not None:
            in_background(release_eventually(redis, later))
        answer(redis, queued, error)
    return usable


def answer(redis: Any, queued: Queued, error: Optional[BaseException] = None) -> None:
    """Hands a write's caller its outcome (its reply is the write's), or ``error``. A caller
    that left (cancelled) does not take it: a grant made for it is released in the background
    (:meth:`Queued.unclaimed`)."""
    waiter = queued.waiter
    if waiter.done():
        release = queued.unclaimed(error)
        if release is not None:
            in_background(release_eventually(redis, release))
    elif error is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(error)


class Line:
    """As :class:`leasehold.lock.Line`, for a ``redis.asyncio`` connection."""

    def __init__(self) -> None:
        self.connection: Any = None

    async def drop(self) -> None:
        """Closes the connection; the next call makes a new one."""
        connection, self.connection = self.connection, None
        if connection is not None:
            await connection.disconnect()


#: The sessions' heartbeat and watcher tasks (a running task needs a reference kept).
_SESSION_TASKS: Set["asyncio.Task[None]"] = set()


class Session:
    """:class:`leasehold.lock.Session` over ``redis.asyncio``: the heartbeat and the watcher are
    tasks of the event loop that opened the session (cancelled when it ends: the server then
    ends the session after the grace). Every task using the client shares it."""

    def __init__(self, master: Master, settings: SessionSettings) -> None:
        self.master = master
        #: The process it belongs to (a forked child makes its own).
        self.pid = os.getpid()
        self.state = SessionState(settings)
        self._io = asyncio.Lock()
        self._line = Line()
        self._stopped = asyncio.Event()
        self._wake = asyncio.Event()
        self.state.on_change = self._wake.set
        self._running = False
        self._heart: Optional["asyncio.Task[None]"] = None
        self._watcher: Optional["asyncio.Task[None]"] = None
        weakref.finalize(self, self.state.stop)

    async def term(self) -> Optional[Term]:
        """As :meth:`leasehold.lock.Session.term`."""
        term = self.state.usable()
        if (term is not None and self._running) or self.state.unsupported or self._stopped.is_set():
            return term
        async with self._io:
            term = self.state.usable()
            if term is None and not self.state.unsupported:
                await self._refresh()
                term = self.state.usable()
            if term is not None:
                self._start()
        return term

    async def gone(self, term: Term) -> None:
        """As :meth:`leasehold.lock.Session.gone`."""
        async with self._io:
            if self.state.current is term and term.holds():
                await self._open(replaced=term)

    async def close(self) -> None:
        """As :meth:`leasehold.lock.Session.close`."""
        self._stopped.set()
        async with self._io:
            term = self.state.current
            if term is not None and self._line.connection is not None:
                try:
                    await self._call([["LOCK.SESSION", "CLOSE", term.id]], reconnect=False)
                except Exception as error:
                    logger.debug("closing session %s: %r", term.id, error)
            await self._line.drop()
            self.state.close()
        for task in (self._heart, self._watcher):
            if task is not None:
                task.cancel()

    async def _refresh(self) -> None:
        """As :meth:`leasehold.lock.Session._refresh`."""
        self.state.expire_due()
        term = self.state.current
        if term is not None and term.holds():
            (reply,), sent = await self._call([["LOCK.SESSION", "ATTACH", term.id]])
            if not isinstance(reply, Exception):
                self.state.confirmed(term, sent)
            elif no_such_session(reply):
                await self._open(replaced=term)
            else:
                raise reply
            return
        stale = () if term is None else (["LOCK.SESSION", "CLOSE", term.id],)
        await self._open(before=stale)

    async def _open(self, replaced: Optional[Term] = None, before: Tuple[List[Any], ...] = ()) -> None:
        """As :meth:`leasehold.lock.Session._open`."""
        replies, sent = await self._call([*before, open_command(self.state.settings)])
        reply = replies[-1]
        if unknown_command(reply):
            logger.warning("the server has no sessions (LOCK.SESSION): holdings keep their "
                           "leases alone")
            self.state.unsupported = True
            return
        if isinstance(reply, Exception):
            raise reply
        new = self.state.opened(*opened(reply), sent)
        self._start()
        if replaced is not None:
            await self._retie(replaced, new)

    async def _retie(self, old: Term, new: Term) -> None:
        """As :meth:`leasehold.lock.Session._retie`."""
        plan = self.state.to_retie(old)
        if not plan:
            return
        commands = [[*command, "SESSION", new.id] for _, _, command in plan]
        try:
            replies, sent = await self._call(commands)
        except Exception as error:
            replies, sent = [error] * len(plan), time.monotonic()
        for (lease, ms, _), reply in zip(plan, replies):
            self.state.retied(old, new, lease, reply, sent, ms)

    async def _call(
        self, commands: List[List[Any]], reconnect: bool = True
    ) -> Tuple[List[Any], float]:
        """As :meth:`leasehold.lock.Session._call`; cancelled, the connection is closed."""
        reused = self._line.connection is not None
        try:
            return await self._send(commands, reconnect)
        except ConnectionError:
            if not (reused and reconnect):
                raise
        return await self._send(commands, reconnect)

    async def _send(self, commands: List[List[Any]], reconnect: bool) -> Tuple[List[Any], float]:
        """One try of :meth:`_call`."""
        grace = self.state.grace()
        connection, setup = self._line.connection, []
        if connection is None:
            if not reconnect:
                raise ConnectionError("the session's connection is closed")
            kwargs = session_connection_kwargs(self.master.connection_kwargs, grace)
            connection = self._line.connection = self.master.connection_class(**kwargs)
            setup = session_setup()
        try:
            if setup:
                try:
                    async with timeout_at(on_loop_clock(time.monotonic() + grace)):
                        await connection.connect()
                except asyncio.TimeoutError:
                    raise TimeoutError("the session's connection did not connect in time") from None
            sent = time.monotonic()
            replies = await send(connection, [*setup, *commands], grace, None)
        except BaseException:
            await self._line.drop()
            raise
        return [reply for reply, _ in replies[len(setup):]], sent

    async def _beat(self) -> Optional[float]:
        """As :meth:`leasehold.lock.Session._beat`."""
        async with self._io:
            if self._stopped.is_set():
                return None
            if self.state.idle():
                self._running = False
                self.state.stop_watching()
                return None
            try:
                await self._refresh()
                failed = False
            except Exception as error:
                logger.debug("session heartbeat: %r", error)
                await self._line.drop()
                failed = True
        grace = self.state.grace()
        return grace / 10 if failed and self.state.usable() is not None else grace / 3

    def _start(self) -> None:
        """Starts the heartbeat and the watcher tasks unless they run (an idle heartbeat ended
        itself; an event loop's end cancels both). Under the I/O lock."""
        heart, watcher = self._heart, self._watcher
        if self._running and heart is not None and not heart.done() and watcher is not None \
                and not watcher.done():
            return
        self.state.start_watching()
        if watcher is None or watcher.done():
            self._watcher = self._task(watch(self.state, self._wake))
        if not self._running or heart is None or heart.done():
            self._heart = self._task(heartbeat(weakref.ref(self), self._line, self._stopped))
        self._running = True

    @staticmethod
    def _task(coroutine: Any) -> "asyncio.Task[None]":
        task = asyncio.ensure_future(coroutine)
        _SESSION_TASKS.add(task)
        task.add_done_callback(_SESSION_TASKS.discard)
        return task


async def heartbeat(ref: "weakref.ref[Session]", line: Line, stopped: asyncio.Event) -> None:
    """As :func:`leasehold.lock.heartbeat`, a task; cancelled (its event loop ends), it closes
    the connection too."""
    try:
        while True:
            session = ref()
            if session is None:
                await line.drop()
                return
            pause = await session._beat()
            del session
            if pause is None:
                return
            try:
                await asyncio.wait_for(stopped.wait(), pause)
                return
            except asyncio.TimeoutError:
                pass
    except asyncio.CancelledError:
        await line.drop()
        raise


async def watch(state: SessionState, wake: asyncio.Event) -> None:
    """A session's watcher task (see :meth:`leasehold._protocol.SessionState.watch`): expires
    its terms as their deadlines pass, woken early when a term opens; until the session is
    closed or idle."""
    while not state.stopped and state.watching:
        wake.clear()
        state.expire_due()
        deadline = state.next_deadline()
        left = 1.0 if deadline is None else deadline - time.monotonic()
        try:
            await asyncio.wait_for(wake.wait(), min(max(left, 0.0), 1.0))
        except asyncio.TimeoutError:
            pass


class Lock(LockBase):
    """:class:`leasehold.Lock` for ``redis.asyncio`` clients; see it for the differences from
    redis-py's lock. With ``thread_local=True`` (the default) each asyncio task keeps its own
    holding, so tasks sharing one lock object exclude each other (redis-py's asyncio lock keeps
    it per thread, which every task of the loop shares): release a holding from the task that
    acquired it, or pass ``thread_local=False`` to share one holding between tasks."""

    holder_state = TaskLocal
    lost_signal = asyncio.Event

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
        """Set once the current holding is known lost (see :attr:`leasehold.Lock.lost`)."""
        lease = self.local.lease
        return lease.lost if lease is not None else asyncio.Event()

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

    async def guard(self, *command: Any) -> Any:
        """As :meth:`leasehold.Lock.guard`: ``await lock.guard("DECRBY", "stock:42", 1)`` runs
        the command only while this holding holds the lock with its fencing token."""
        return await self._run_synced(self.name, self._guarded(command))

    async def fenced(self, fence: Any, *command: Any) -> Any:
        """As :meth:`leasehold.Lock.fenced`: the command through ``fence`` with this holding's
        fencing token."""
        return await self._run_synced(fence, self._fenced_by_holding(fence, command))

    async def _run_synced(self, key: Any, command: List[Any]) -> Any:
        """As :meth:`leasehold.Lock._run_synced`: a cancelled call closes its connection."""
        write = Write(command, lambda reply: True, mapped=guarded_reply)
        if self.sync.off:
            try:
                write.reply = await self.redis.execute_command(*command)
            except ResponseError as error:
                write.reply = guarded_reply(error)
            return write.outcome()
        deadline = self._sync_deadline(None)

        async def send_to(master: Master, asking: bool, term: Optional[Term]) -> Write:
            return await self._alone(
                "sync", master, deadline, lambda: Pipeline(write, sync=self.sync, asking=asking),
                keep_binding=True)

        try:
            await self._routed(send_to, key=key, sessions=False)
        except QueuedOut as queued:
            raise queued.not_replicated() from None
        reply = write.outcome()
        if write.problem is not None:
            raise write.problem
        return reply

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
            except NotReplicatedError as refused:
                # Not again with an owner being released in the background (left_behind).
                if deadline is None or time.monotonic() >= deadline or refused.left_behind:
                    raise
            except (TimeoutError, ConnectionError):
                granted = await self._recover(owner)
                if granted is not None:
                    return granted

    async def _kept(self, owner: Any, write: Write) -> Optional[Grant]:
        """As :meth:`leasehold.Lock._kept`."""
        try:
            reply = write.outcome()
        except NotReplicatedError as refused:
            if refused.left_behind:
                asyncio.ensure_future(self._release_eventually(owner))
            raise
        if reply is None:
            return None
        unkept = self._unkept(write)
        if unkept is not None:
            await self.redis.execute_command(*self._command("RELEASE", owner))
            raise unkept
        return Grant(reply, write.started, write.term)

    async def _waited(self, owner: Any, deadline: Optional[float]) -> Write:
        """As :meth:`leasehold.Lock._waited`."""
        return await self._routed(lambda master, asking, term: self._alone(
            "wait", master, deadline,
            lambda: self._wait_pipeline(owner, asking, deadline, term)))

    async def _synced(self, write: Write) -> Write:
        """As :meth:`leasehold.Lock._synced`."""
        deadline = self._sync_deadline(write.until)
        try:
            return await self._routed(lambda master, asking, term: self._synced_to(
                master, asking, write, deadline, term))
        except QueuedOut as queued:
            raise queued.not_replicated() from None

    async def _synced_to(
        self, master: Master, asking: bool, write: Write, deadline: float, term: Optional[Term]
    ) -> Write:
        """As :meth:`leasehold.Lock._synced_to`."""
        write.tie(term)
        if not asking and write.undo is not None and self.sync.batches:
            return await batched(self.redis, master, write, self.sync, deadline)
        return await self._alone(
            "sync", master, deadline,
            lambda: Pipeline(write, sync=self.sync, asking=asking), write.until)

    async def _routed(
        self,
        send: Callable[[Master, bool, Optional[Term]], Awaitable[Write]],
        key: Any = None,
        sessions: bool = True,
    ) -> Write:
        """As :meth:`leasehold.Lock._routed`."""
        redirect = None
        cancels = CANCELS_BEFORE.set(cancel_requests())
        try:
            for attempt in range(REDIRECTS):
                master = await self._master(redirect, key)
                session = pools_of(self.redis).session(master, Session) if sessions else None
                with writing(session):
                    term = None if session is None else await session.term()
                    write = await send(master, redirect is not None, term)
                if isinstance(write.reply, MovedError):
                    redirect = None
                    await self.redis.nodes_manager.initialize()
                elif isinstance(write.reply, AskError):
                    redirect = (write.reply.host, int(write.reply.port))
                elif no_such_session(write.reply) and term is not None and attempt < REDIRECTS - 1:
                    await session.gone(term)
                else:
                    return write
            raise TryAgainError("the lock's slot kept moving")
        finally:
            CANCELS_BEFORE.reset(cancels)

    async def _alone(
        self,
        kind: str,
        master: Master,
        deadline: Optional[float],
        build: Callable[[], Pipeline],
        until: Optional[float] = None,
        keep_binding: bool = False,
    ) -> Write:
        """As :meth:`leasehold.Lock._alone`: a cancelled call closes its connection (the server
        releases a grant it still held for it)."""
        pool = pools_of(self.redis).pool(kind, master, BudgetedPool)
        # As in `leasehold.Lock._alone` (a connection whose reply was lost is closed before it
        # goes back), without context managers: they were a tenth of an acquire with 64 tasks.
        connection = await borrow(pool, deadline)
        try:
            pipeline = build()
            await exchange(connection, pipeline, until, keep_binding)
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)
        return pipeline.write

    async def _master(
        self, redirect: Optional[Tuple[str, int]] = None, key: Any = None
    ) -> Master:
        """The server, or the master of the lock's slot (``key``'s, when given) in a
        ``RedisCluster`` (which learns its slots at its first command), or the one an ``ASK``
        named."""
        if not is_cluster(self.redis):
            pool = self.redis.connection_pool
            return Master(None, pool.connection_class, pool.connection_kwargs)
        await self.redis.initialize()
        node = self.redis.get_node_from_key(self.name if key is None else key)
        master = Master(node.name, node.connection_class, node.connection_kwargs)
        return master if redirect is None else redirected(master, *redirect)

    async def _recover(self, owner: Any) -> Optional[Grant]:
        try:
            return await self._try(owner)
        except RedisError:
            asyncio.ensure_future(self._release_eventually(owner))
            raise

    async def _release_eventually(self, owner: Any) -> None:
        await release_eventually(self.redis, self._command("RELEASE", owner))

    async def _renew(
        self, owner: Any, lease_ms: int, lease: Lease, until: Optional[float] = None
    ) -> bool:
        """As :meth:`leasehold.Lock._renew`."""
        write = self._renew_write(owner, lease_ms, until)
        try:
            write = await self._synced(write)
        except Exception:
            self._unsure(lease, write.started, lease_ms)
            raise
        return self._renewal_counts(write, lease, lease_ms)


class Keeper:
    """The watchdog as a task (see :class:`leasehold.lock.Keeper`): renews every third of the
    lease (one that did not count, again soon: :class:`leasehold._protocol.Renewals`) until
    stopped or refused as not held; sets :attr:`lost` when the lease that counted ends first."""

    def __init__(
        self, renew: Callable[[int, float], Awaitable[bool]], lease_ms: int, lease: Lease
    ) -> None:
        self.lost = lease.lost
        self._renew = renew
        self._lease_ms = lease_ms
        self._lease = lease
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        """Stops renewing (at release); a renewal in flight is cancelled, its connection closed."""
        self._task.cancel()

    async def _run(self) -> None:
        renewals = Renewals(self._lease_ms)
        while True:
            await asyncio.sleep(max(min(renewals.due, self._lease.end) - time.monotonic(), 0))
            now = time.monotonic()
            if now >= self._lease.end:
                break
            if now < renewals.due:
                continue
            try:
                if not await self._renew(self._lease_ms, self._lease.end):
                    break
            except RedisError as error:
                renewals.failed(error)  # not synced, or no reply: again soon, while the lease lasts
            else:
                renewals.counted(now)
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


class Candidacy(Campaigning, Lock):
    """:class:`leasehold.election.Candidacy` over ``redis.asyncio``: one campaign as an asyncio
    :class:`Lock` whose holding is the term (watched; shared by every task)."""

    def __init__(self, redis: Any, name: Any, value: Value, ttl: Number, sync: Sync) -> None:
        super().__init__(redis, name, timeout=ttl, thread_local=False, watchdog=True, sync=sync)
        self.value = value


class Leadership(LeadershipBase):
    """:class:`leasehold.Leadership` over ``redis.asyncio``: ``await proclaim(value)``,
    ``await resign()``, ``async with`` resigns on exit; :attr:`lost` is an ``asyncio.Event``
    and the watchdog a task of the event loop."""

    @property
    def lost(self) -> asyncio.Event:
        """Set once the term is known lost, before another candidate can lead (see
        :attr:`leasehold.Leadership.lost`)."""
        return self._lease.lost

    async def proclaim(self, value: Value) -> bool:
        """Proclaims ``value`` from now on; ``True`` once set (see
        :meth:`leasehold.Leadership.proclaim`: ``LockNotOwnedError`` when the term no longer
        leads)."""
        self._check()
        reply: Any
        try:
            reply = await self.election.redis.execute_command(
                "LOCK.PROCLAIM", self.name, self.epoch, value, self.election.sync.option)
        except ResponseError as error:
            reply = error
        return self._proclaimed(reply, value)

    async def resign(self) -> None:
        """Ends the term; the next waiting candidate leads at once (see
        :meth:`leasehold.Leadership.resign`)."""
        self._check()
        self.resigned = True
        self._lock._forget()
        if await self.election.redis.execute_command("LOCK.RESIGN", self.name, self.epoch) != 1:
            raise LockNotOwnedError(f"Cannot resign: the term of epoch {self.epoch} of "
                                    f"{self.name!r} no longer leads")

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        if not self.resigned:
            await self.resign()


class Election(ElectionBase):
    """:class:`leasehold.Election` over ``redis.asyncio`` (a ``redis.asyncio.Redis``,
    ``RedisCluster`` or ``ConnectionPool``): ``await campaign(value)``, ``await leader()``,
    ``async for state in observe()``."""

    pooled = (redis_asyncio.ConnectionPool, redis_asyncio.Redis)

    async def campaign(
        self, value: Value = b"", timeout: Optional[Number] = None
    ) -> Optional[Leadership]:
        """Campaigns with ``value``, waiting in line up to ``timeout`` seconds; the
        :class:`Leadership`, or ``None`` at the timeout (see
        :meth:`leasehold.Election.campaign`)."""
        self._begin()
        leadership = None
        try:
            lock = Candidacy(self.redis, self.name, value, self.ttl, self.sync)
            if await lock.acquire(blocking=True, blocking_timeout=timeout, token=self.candidate):
                leadership = Leadership(self, lock, value)
        finally:
            self._end(leadership)
        return leadership

    async def leader(self) -> ElectionState:
        """Who leads now (``LOCK.LEADER``)."""
        reply = await self.redis.execute_command("LOCK.LEADER", self.name)
        return state_of(reply, self.redis.get_encoder())

    def observe(self, timeout: Optional[Number] = None) -> AsyncIterator[ElectionState]:
        """Who leads, then every change, as an async iterator (see
        :meth:`leasehold.Election.observe`); on a connection of its own, closed when the
        iterator is closed (``contextlib.aclosing``, or ``break`` and the event loop's
        finalizer)."""
        if timeout is not None:
            to_ms(timeout, "timeout")
        return self._observe(timeout)

    async def _observe(self, timeout: Optional[Number]) -> AsyncIterator[ElectionState]:
        line = ObserverLine(self)
        encoder = self.redis.get_encoder()
        try:
            seen = state_of(await line.call(observe_command(self.name, None, None), 0.0), encoder)
            yield seen
            while True:
                deadline = None if timeout is None else time.monotonic() + timeout
                reply = None
                while reply is None:
                    block = observe_wait(time_left(deadline), OBSERVE_BLOCK)
                    if block is None:
                        return
                    reply = await line.call(observe_command(self.name, seen, block), block)
                seen = state_of(reply, encoder)
                yield seen
        finally:
            await line.close()


class ObserverLine:
    """:class:`leasehold.election.ObserverLine` for a ``redis.asyncio`` connection."""

    def __init__(self, election: Election) -> None:
        self.election = election
        self.connection: Any = None

    async def call(self, command: List[Any], block: float) -> Any:
        """As :meth:`leasehold.election.ObserverLine.call`."""
        failed = False
        for _ in range(REDIRECTS):
            try:
                reply = await self._send(command, block)
            except (ConnectionError, TimeoutError):
                await self.close()
                if failed:
                    raise
                failed = True
                continue
            if isinstance(reply, MovedError) and is_cluster(self.election.redis):
                await self.close()
                await self.election.redis.nodes_manager.initialize()
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply
        raise ConnectionError(f"could not observe {self.election.name!r}")

    async def _send(self, command: List[Any], block: float) -> Any:
        if self.connection is None:
            master = await Candidacy(self.election.redis, self.election.name, b"", DEFAULT_LEASE,
                                     self.election.sync)._master()
            self.connection = master.connection_class(
                **pooled_connection_kwargs(master.connection_kwargs))
        ((reply, _),) = await send(self.connection, [command], block + WAIT_MARGIN, None)
        return reply

    async def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            await connection.disconnect()
