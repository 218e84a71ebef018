"""What the sync and asyncio lock classes share without I/O: the module's commands, time
conversion, the sync settings and the pipeline that syncs a write, and a holder's state."""

from __future__ import annotations

import contextvars
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple, Union

from redis.exceptions import LockError

Number = Union[int, float]

logger = logging.getLogger("leasehold")

#: The lease of a lock made with ``timeout=None``, in seconds. redis-py's lock then never
#: expires; a module lock always has a lease, so the watchdog renews this one until release,
#: and a crashed holder's lock ends 30 s later instead of never.
DEFAULT_LEASE = 30.0

#: How long, in seconds, a reply on a dedicated connection may take beyond the time the server
#: may take for it (a wait's, a ``WAIT``'s); after it the reply counts as lost, the connection
#: is closed, and the client finds out for itself whether it got the lock.
WAIT_MARGIN = 1.0

#: How long a loop waits before asking again after ``TRYAGAIN`` (the server could not issue a
#: fencing token yet), in seconds.
TRY_AGAIN_DELAY = 0.01


def to_ms(seconds: Number, what: str = "timeout") -> int:
    """``seconds`` (a float or int, as redis-py takes times) in whole milliseconds, at least 1.

    Raises ``LockError`` for zero, a negative time, or less than a millisecond."""
    ms = int(seconds * 1000)
    if ms < 1:
        raise LockError(f"{what} must be at least 0.001 s, not {seconds!r}")
    return ms


@dataclass(frozen=True)
class Sync:
    """Whether and how grants and renewals reach the replicas before they count. A grant made
    without waiting, or a renewal, goes on a connection of the client's sync pool as one plain
    pipeline — ``INFO replication``; the write; ``WAIT replicas timeout`` (``WAITAOF 1
    replicas timeout`` with ``aof``) — and a blocking acquire on one of its wait pool as the
    write; ``INFO replication``; ``WAIT``, run by the server once the wait is answered: one
    round trip (see :func:`leasehold.configure_pools`).

    ``replicas=None`` (the default) waits for every replica the lock's master has online,
    learned from the ``INFO replication`` in that same pipeline (a ``WAIT`` for more follows
    on the same connection when it tells of more than were known), so a replica that attached
    just before the grant is waited for. The count is never lowered for the same master (known
    by its replication ID, which a promotion changes): in a split brain an old master loses
    exactly the replica that was promoted, and must not count a grant as synced to the one
    left. A new master behind the same client — promoted, or the old one restarted — starts
    from one fewer than the most any master had rather than from what it reports at once (its
    replicas reattach some time later). A lone server waits for nothing.

    ``replicas=n`` waits for exactly ``n``. **Not safe when the master has more than ``n``
    replicas**: a failover may promote a replica that did not acknowledge — a ten-minute ``make
    chaos`` run (888e1d5, two replicas) found 16 double grants among grants synced to one
    replica, all after ``SENTINEL FAILOVER``, and 0 among grants synced to every replica.
    ``replicas=0`` (:data:`SYNC_OFF`) turns syncing off: grants and renewals go on the
    client's own connection and count at once.

    A grant too few replicas acknowledged within ``timeout`` is released and
    :class:`NotReplicatedError` raised. A renewal applied on the master but not acknowledged
    does not count: ``extend`` / ``reacquire`` raise :class:`NotReplicatedError`, the lease end
    the holding believes (``lease_end``) stays the last synced one, and the watchdog keeps
    trying and reports the holding lost when that lease ends. So while a replica is down,
    every grant and renewal fails after ``timeout`` and watched holdings are reported lost as
    their leases end: bring the replica back — or, accepting the risk above, sync to fewer
    replicas or switch syncing off for that time. A replica removed for good keeps counting
    for its master: use ``replicas=n``, or a new client (connection pool).

    ``timeout`` is in seconds (default 1 s: a replica that is up acknowledges within a round
    trip plus its lag; a second runs out only when one is down or far behind). ``LockError``
    for a timeout under 1 ms."""

    replicas: Optional[int] = None
    timeout: Number = 1.0
    aof: bool = False

    def __post_init__(self) -> None:
        to_ms(self.timeout, "sync timeout")

    @property
    def off(self) -> bool:
        """Whether syncing is off (``replicas=0``)."""
        return self.replicas == 0

    def wait_command(self, replicas: int, timeout: Number) -> List[Any]:
        """``WAIT replicas timeout-ms``, or ``WAITAOF 1 replicas timeout-ms`` (``timeout`` in
        seconds, at least 1 ms)."""
        ms = max(int(timeout * 1000), 1)
        return ["WAITAOF", 1, replicas, ms] if self.aof else ["WAIT", replicas, ms]

    def acked(self, reply: Any) -> int:
        """How many replicas a ``WAIT`` / ``WAITAOF`` reply says have the write."""
        if self.aof:
            local, replicas = (int(n) for n in reply)
            return replicas if local >= 1 else 0
        return int(reply)


#: No syncing: a grant or renewal counts as soon as the master made it.
SYNC_OFF = Sync(replicas=0)


class NotReplicatedError(LockError):
    """A grant or renewal the replicas did not acknowledge in time: the master made it, but
    fewer replicas than wanted had it within the sync timeout (or no dedicated connection was
    free within it). A grant is released (owner-checked); a renewal does not count (the lease
    end believed stays the last synced one). Not "busy": the lock was there, the replicas were
    not."""

    def __init__(self, acked: int, wanted: int, reason: Optional[str] = None) -> None:
        super().__init__(reason or f"reached {acked} of the {wanted} replicas wanted in time")
        self.acked = acked
        self.wanted = wanted


class Learned:
    """How many replicas one master has: the most it reported online under its current
    replication ID (see :class:`Sync`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replication_id: Optional[str] = None
        self._replicas = 0
        self._most = 0  # the most replicas any master here had

    def known(self) -> int:
        """The count learned so far (0 before anything was heard)."""
        with self._lock:
            return self._replicas

    def heard(self, info: Any) -> int:
        """Takes note of an ``INFO replication`` reply (its text) and returns the count."""
        info = text(info)
        found = _MASTER_REPLID.search(info)
        replication_id = None if found is None else found.group(1)
        online = len(_ONLINE_REPLICA.findall(info)) if _ROLE_MASTER.search(info) else 0
        with self._lock:
            if replication_id != self._replication_id:
                # A new master here starts from one fewer than the most (see Sync).
                self._replication_id = replication_id
                self._replicas = max(self._most - 1, 0)
            self._replicas = max(self._replicas, online)
            self._most = max(self._most, self._replicas)
            return self._replicas


#: In ``INFO replication``: the server is a master; its replication ID; a replica online.
_ROLE_MASTER = re.compile(r"^role:master\r?$", re.M)
_MASTER_REPLID = re.compile(r"^master_replid:(\w+)", re.M)
_ONLINE_REPLICA = re.compile(r"^slave\d+:[^\r\n]*\bstate=online\b", re.M)


class Grant(NamedTuple):
    """A grant as ``acquire`` keeps it."""

    #: ``LOCK.ACQUIRE``'s reply (a token), or ``LOCK.MACQUIRE``'s (one per key).
    reply: Any
    #: When its lease began at the earliest, ``time.monotonic()`` seconds: when it was sent,
    #: or for a wait when it was answered.
    started: float


class Lease:
    """When a holding's lease ends as last synced, ``time.monotonic()`` seconds: what
    ``lease_end`` says and when the watchdog reports the holding lost. Shared by the holder and
    its watchdog (which renews in another thread or task)."""

    def __init__(self, end: float) -> None:
        self.end = end


def known_replicas(sync: Sync, learned: Learned) -> int:
    """How many replicas a write waits for before ``INFO`` is heard: the fixed count, or the one
    learned for its master so far."""
    return learned.known() if sync.replicas is None else sync.replicas


class QueuedOut(Exception):
    """Every connection of a pool stayed borrowed until the caller's budget ran out."""

    def __init__(self, wanted: int) -> None:
        super().__init__("no dedicated connection was free within the budget")
        #: The replicas the write would have waited for.
        self.wanted = wanted

    def not_replicated(self) -> NotReplicatedError:
        """What a synced grant or renewal raises for it."""
        return NotReplicatedError(
            0, self.wanted, "no connection of the sync pool was free within the sync timeout")


class Pipeline:
    """One write on a dedicated connection with what syncs it, as one plain pipeline (never
    ``MULTI``/``EXEC``: a ``WAIT`` in a transaction does not wait) — what is sent, and what the
    replies mean; the I/O is the lock's:

    - a grant or renewal sent without waiting: ``INFO replication``; the write; ``WAIT k t``;
    - a blocking acquire: the write (``... WAIT``); ``INFO replication``; ``WAIT k t`` — the
      server runs one connection's commands in order, so these run once the wait is answered;

    the write right after ``ASKING`` when an ``ASK`` redirection sent it to another cluster
    master. ``k`` is
    the count already learned for the master (no ``WAIT`` for 0; with ``Sync(replicas=n)``
    ``n`` and no ``INFO``; with the sync off neither). When the write was applied and ``INFO``
    tells of more replicas than ``k``, :meth:`again` is the ``WAIT`` for them, sent on the
    same connection: a ``WAIT`` covers every earlier write of its connection."""

    def __init__(
        self,
        write: List[Any],
        *,
        sync: Sync,
        learned: Learned,
        applied: Callable[[Any], bool],
        waiting: bool,
        wait_left: Optional[Number] = None,
        sync_timeout: Optional[Number] = None,
        asking: bool = False,
    ) -> None:
        """``write`` the command; ``applied`` whether its reply means it was made;
        ``waiting`` for a blocking acquire that may wait ``wait_left`` seconds in the server
        (``None``: no limit); ``sync_timeout`` the ``WAIT`` timeout in seconds (default the
        sync's); ``asking`` after an ``ASK``."""
        self.write = write
        self.sync = sync
        self.learned = learned if sync.replicas is None else None
        self.applied = applied
        self.waiting = waiting
        self.wait_left = wait_left
        self.sync_timeout = sync.timeout if sync_timeout is None else sync_timeout
        self.asking = asking
        self.first = known_replicas(sync, learned)
        self._sent = self._parts()
        #: The write's reply (an exception for an error reply), the replicas wanted and how
        #: many acknowledged, once taken; and an error replied to ``INFO`` or ``WAIT``.
        self.reply: Any = None
        self.wanted = self.first
        self.acked = 0
        self.error: Optional[Exception] = None
        self.started = 0.0

    def commands(self) -> List[List[Any]]:
        """What to send, in order."""
        return [command for _, command, _ in self._sent]

    def within(self) -> Optional[float]:
        """How long the replies may take, in seconds: what the server may take for each (the
        wait, the ``WAIT``) plus :data:`WAIT_MARGIN`; ``None`` for a wait without a limit."""
        times = [within for _, _, within in self._sent]
        return None if None in times else sum(times)  # type: ignore[arg-type]

    def _parts(self) -> List[Tuple[str, List[Any], Optional[float]]]:
        """Each command named, with how long its reply may take."""
        asking = [("asking", ["ASKING"], WAIT_MARGIN)] if self.asking else []
        info = [("info", ["INFO", "replication"], WAIT_MARGIN)] if self.learned is not None else []
        wait = [("wait", self.sync.wait_command(self.first, self.sync_timeout),
                 self.sync_timeout + WAIT_MARGIN)] if self.first else []
        if not self.waiting:  # ASKING holds for the next command only
            return info + asking + [("write", self.write, WAIT_MARGIN)] + wait
        within = None if self.wait_left is None else self.wait_left + WAIT_MARGIN
        return asking + [("write", self.write, within)] + info + wait

    def take(self, sent: float, replies: Sequence[Tuple[Any, float]]) -> None:
        """Takes the replies — each with when it was read, ``time.monotonic()`` seconds — of
        what was sent at ``sent``."""
        got = {name: reply for (name, _, _), reply in zip(self._sent, replies)}
        self.reply, answered = got["write"]
        self.started = answered if self.waiting else sent
        if "info" in got:
            info = got["info"][0]
            if isinstance(info, Exception):
                self.error = info
            else:
                self.wanted = self.learned.heard(info)  # type: ignore[union-attr]
        if "wait" in got:
            self._take_wait(got["wait"][0])

    def again(self) -> Optional[Tuple[List[Any], float]]:
        """The ``WAIT`` for the replicas ``INFO`` told of beyond ``k``, if the write was
        applied; with how long its reply may take, in seconds."""
        if (not self.applied(self.reply) or self.error is not None or self.acked < self.first
                or self.wanted <= self.first):
            return None
        return self.sync.wait_command(self.wanted, self.sync_timeout), self.sync_timeout + WAIT_MARGIN

    def take_again(self, reply: Any) -> None:
        """Takes the reply to :meth:`again`."""
        self._take_wait(reply)

    def _take_wait(self, reply: Any) -> None:
        if isinstance(reply, Exception):
            self.error = reply
        else:
            self.acked = self.sync.acked(reply)

    def outcome(self) -> Any:
        """The write's reply if it was applied, else ``None``; raises the error it got."""
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply if self.applied(self.reply) else None

    def not_synced(self) -> Optional[Exception]:
        """For an applied write, why it does not count yet (an error replied to ``INFO`` or
        ``WAIT``, or :class:`NotReplicatedError`); else ``None``."""
        if self.error is not None:
            return self.error
        if self.acked < self.wanted:
            return NotReplicatedError(self.acked, self.wanted)
        return None


def deadline_of(within: Optional[float], until: Optional[float]) -> Optional[float]:
    """The ``time.monotonic()`` by which replies that may take ``within`` seconds from now
    (``None``: no limit) must have come, and no later than ``until``."""
    deadline = None if within is None else time.monotonic() + within
    if until is None:
        return deadline
    return until if deadline is None else min(deadline, until)


def is_cluster(redis: Any) -> bool:
    """True for a redis-py ``RedisCluster`` (sync or asyncio)."""
    return hasattr(redis, "get_node_from_key")


#: How many ``MOVED`` / ``ASK`` redirections a grant on a connection of its own follows.
REDIRECTS = 5


def new_owner() -> str:
    """A new owner: a random UUID (v4) in 32 hex digits, as redis-py's tokens are."""
    return uuid.uuid4().hex


def wait_ms(left: Optional[Number]) -> int:
    """The ``WAIT`` argument of ``LOCK.ACQUIRE`` for ``left`` seconds: whole ms, at least 1;
    0 (no limit) for ``None``."""
    return 0 if left is None else max(int(left * 1000), 1)


def own_ttl_ms(info: Any, owner: Any) -> Optional[int]:
    """The lease left of ``owner``'s holding in a ``LOCK.INFO`` reply (RESP2 or RESP3, bytes or
    str), or ``None`` when it holds nothing."""
    fields = as_map(info)
    if fields is None:
        return None
    if text(fields.get("mode")) != "shared":
        return int(fields["ttl"]) if text(fields.get("owner")) == text(owner) else None
    for holder in fields.get("owners") or []:
        holder = as_map(holder) or {}
        if text(holder.get("owner")) == text(owner):
            return int(holder["ttl"])
    return None


def least_lease_ms(infos: Sequence[Any], owner: Any) -> Optional[int]:
    """The shortest lease left of ``owner``'s holdings in ``LOCK.INFO`` replies (one per key of
    a lock or a set), or ``None`` when it does not hold every one."""
    lefts = [own_ttl_ms(info, owner) for info in infos]
    return None if any(left is None for left in lefts) else min(lefts)  # type: ignore[type-var]


def as_map(reply: Any) -> Optional[dict]:
    """A reply map (RESP3 dict or RESP2 flat list) with text keys."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        return {text(key): value for key, value in reply.items()}
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


def text(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if value is None else str(value)


class Local(threading.local):
    """What one holder (one thread, with ``thread_local=True``) keeps: redis-py's ``token``
    (the owner), the fencing tokens, the lease, and the watchdog."""

    token: Any = None
    fencing_token: Optional[int] = None
    fencing_tokens: Optional[List[int]] = None
    lease: Optional[Lease] = None
    keeper: Any = None


class Shared:
    """What one holder keeps when ``thread_local=False``: the same fields, for every thread."""

    token: Any = None
    fencing_token: Optional[int] = None
    fencing_tokens: Optional[List[int]] = None
    lease: Optional[Lease] = None
    keeper: Any = None


class TaskLocal:
    """What one holder (one asyncio task, with ``thread_local=True``) keeps: the fields of
    :class:`Local`, in a context variable. The tasks of one thread share a ``threading.local``,
    so with it two tasks on one lock would overwrite each other's owner, and one would release
    the other's holding; each task runs in a context of its own. A task started by a holder
    starts with a copy of what the holder kept then."""

    _FIELDS = ("token", "fencing_token", "fencing_tokens", "lease", "keeper")

    def __init__(self) -> None:
        state: contextvars.ContextVar[dict] = contextvars.ContextVar("leasehold_holder", default={})
        object.__setattr__(self, "_state", state)

    def __getattr__(self, name: str) -> Any:
        if name not in TaskLocal._FIELDS:
            raise AttributeError(name)
        return self._state.get().get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in TaskLocal._FIELDS:
            raise AttributeError(name)
        # A new dict each time: the one a context holds may be its parent's too.
        self._state.set({**self._state.get(), name: value})


class LockBase:
    """What the sync and asyncio ``Lock`` share: redis-py's constructor (same arguments and
    defaults, plus ``watchdog``), the current holding's state, and the lease and command they
    send. The I/O is theirs."""

    #: The module's options for this kind of lock (``SHARED``, ``LIMIT n``).
    mode: Sequence[Any] = ()

    #: The keys of a set taken together (``LOCK.MACQUIRE``, :class:`leasehold.MultiLock`);
    #: ``None`` for one lock, ``name``.
    names: Optional[List[Any]] = None

    #: Where a holder's state lives with ``thread_local=True``: per thread (per task for asyncio).
    holder_state: type = Local

    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        watchdog: bool = False,
        sync: Sync = Sync(),
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.watchdog = watchdog or timeout is None
        self.sync = sync
        self.local: Union[Local, TaskLocal, Shared] = self.holder_state() if self.thread_local else Shared()

    @property
    def fencing_token(self) -> Optional[int]:
        """The fencing token of the current holding, ``None`` when not held. For a set, the
        largest of its tokens: the one its newly taken keys share."""
        return self.local.fencing_token

    @property
    def fencing_tokens(self) -> Optional[List[int]]:
        """The fencing tokens of the current holding, one per key (for a set in the order of
        its names; a key the owner held before keeps its older token); ``None`` when not
        held."""
        return self.local.fencing_tokens

    @property
    def lease_end(self) -> Optional[float]:
        """When the current holding's lease ends as this client knows it, in
        ``time.monotonic()`` seconds: its grant's lease counted from when the grant was sent
        (for a wait, answered), moved by every renewal that counted — synced to the replicas
        like grants (:class:`leasehold.Sync`), counted from when it was sent. ``None`` when not
        held. The watchdog reports the holding lost at this time."""
        lease = self.local.lease
        return None if lease is None else lease.end

    def _keys(self) -> List[Any]:
        """The lock's key, or a set's keys."""
        return [self.name] if self.names is None else list(self.names)

    def _command(self, verb: str, owner: Any, *rest: Any) -> List[Any]:
        """``LOCK.<verb> name owner rest...``, or for a set ``LOCK.M<verb> numkeys names...
        owner rest...``."""
        if self.names is None:
            return [f"LOCK.{verb}", self.name, owner, *rest]
        return [f"LOCK.M{verb}", len(self.names), *self.names, owner, *rest]

    def _whole(self, reply: Any) -> bool:
        """Whether a ``LOCK.RELEASE`` / ``LOCK.RENEW`` reply (a set's: how many) covers every
        key."""
        return reply == len(self._keys())

    def _lease_ms(self) -> int:
        """The lease each acquire and renewal asks for, in ms (``timeout``, or 30 s)."""
        return to_ms(DEFAULT_LEASE if self.timeout is None else self.timeout)

    def _acquire_command(self, owner: Any, wait_ms: Optional[int] = None) -> List[Any]:
        """``LOCK.ACQUIRE name owner lease-ms [SHARED [LIMIT n]] [WAIT wait-ms]`` (a set:
        ``LOCK.MACQUIRE numkeys names... owner lease-ms [WAIT wait-ms]``)."""
        command = self._command("ACQUIRE", owner, self._lease_ms(), *self.mode)
        if wait_ms is not None:
            command += ["WAIT", wait_ms]
        return command

    def _granted(self, reply: Any) -> bool:
        """Whether a ``LOCK.ACQUIRE`` / ``LOCK.MACQUIRE`` reply is a grant."""
        return reply is not None and not isinstance(reply, Exception)

    def _try_pipeline(self, owner: Any, learned: Learned, asking: bool) -> Pipeline:
        """A grant without waiting, synced."""
        return Pipeline(self._acquire_command(owner), sync=self.sync, learned=learned,
                        applied=self._granted, waiting=False, asking=asking)

    def _wait_pipeline(
        self, owner: Any, learned: Learned, asking: bool, deadline: Optional[float]
    ) -> Pipeline:
        """A blocking acquire waiting in the server until ``deadline`` (``time.monotonic()``
        seconds; ``None``: as long as it takes), then synced."""
        left = None if deadline is None else deadline - time.monotonic()
        return Pipeline(self._acquire_command(owner, wait_ms(left)), sync=self.sync, learned=learned,
                        applied=self._granted, waiting=True, wait_left=left, asking=asking)

    def _renew_pipeline(
        self, owner: Any, lease_ms: int, learned: Learned, asking: bool, until: Optional[float]
    ) -> Pipeline:
        """A renewal to ``lease_ms``, synced; its ``WAIT`` ends by ``until`` at the latest."""
        sync_timeout = None if until is None else min(self.sync.timeout, until - time.monotonic())
        return Pipeline(self._command("RENEW", owner, lease_ms), sync=self.sync, learned=learned,
                        applied=self._whole, waiting=False, sync_timeout=sync_timeout, asking=asking)

    def _sync_deadline(self, until: Optional[float]) -> float:
        """Until when a synced write may queue for a connection: the sync timeout, and no later
        than ``until``."""
        deadline = time.monotonic() + self.sync.timeout
        return deadline if until is None else min(deadline, until)

    def _held(self, owner: Any, grant: Grant) -> None:
        """Keeps a grant: ``owner``, the tokens of ``LOCK.ACQUIRE``'s (or a set's) reply, and
        the lease."""
        reply = grant.reply
        tokens = [int(token) for token in reply] if isinstance(reply, list) else [int(reply)]
        self.local.token = owner
        self.local.fencing_token = max(tokens)
        self.local.fencing_tokens = tokens
        self.local.lease = Lease(grant.started + self._lease_ms() / 1000)

    def _counted(self, lease: Lease, started: float, lease_ms: int) -> bool:
        """A renewal sent at ``started`` counts: the lease believed ends ``lease_ms`` after."""
        lease.end = started + lease_ms / 1000
        return True

    def _renewal_counts(self, pipeline: Pipeline, lease: Lease, lease_ms: int) -> bool:
        """What a synced renewal's replies mean: ``True`` once it counts, ``False`` when the
        lease had run out; raises :class:`NotReplicatedError` (or the error ``WAIT`` got) when
        the master applied it and the replicas did not acknowledge it."""
        if pipeline.outcome() is None:
            return False
        problem = pipeline.not_synced()
        if problem is not None:
            raise problem
        return self._counted(lease, pipeline.started, lease_ms)

    def _forget(self) -> None:
        """Drops the current holding (at release): stops its watchdog."""
        keeper = self.local.keeper
        if keeper is not None:
            keeper.stop()
        self.local.token = None
        self.local.fencing_token = None
        self.local.fencing_tokens = None
        self.local.lease = None
        self.local.keeper = None

    def _released_on_exit(self, error: LockError) -> None:
        """What leaving a ``with`` block does when the release failed: raise, or with
        ``raise_on_release_error=False`` log it as redis-py does."""
        if self.raise_on_release_error:
            raise error
        logger.warning("Lock was unlocked or no longer owned when exiting context manager.")


class SetOf:
    """Makes a lock class a set of locks taken together (``MultiLock``): the constructor takes
    ``names`` where the lock takes ``name``, and the lock's commands become ``LOCK.M*``."""

    names: Optional[List[Any]]

    def __init__(self, redis: Any, names: Sequence[Any], **kwargs: Any) -> None:
        names = list(names)
        if not names:
            raise LockError("a MultiLock needs at least one name")
        super().__init__(redis, names[0], **kwargs)  # type: ignore[call-arg]
        self.names = names
