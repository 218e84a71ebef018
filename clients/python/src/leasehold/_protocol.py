"""What the sync and asyncio lock classes share: the module's commands, time conversion, and
the connection a wait gets for itself."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

from redis.backoff import NoBackoff
from redis.exceptions import LockError
from redis.retry import Retry

Number = Union[int, float]

logger = logging.getLogger("leasehold")

#: The lease of a lock made with ``timeout=None``, in seconds. redis-py's lock then never
#: expires; a module lock always has a lease, so the watchdog renews this one until release,
#: and a crashed holder's lock ends 30 s later instead of never.
DEFAULT_LEASE = 30.0

#: How long, in seconds, after a wait should have ended the client stops waiting for the
#: reply and finds out for itself whether it got the lock.
WAIT_MARGIN = 1.0

#: How long a loop waits before asking again after ``TRYAGAIN`` (the server could not issue a
#: fencing token yet), in seconds.
TRY_AGAIN_DELAY = 0.01


@dataclass(frozen=True)
class Sync:
    """Whether and how a grant reaches the replicas before ``acquire`` returns it: after every
    grant the lock sends ``WAIT replicas timeout`` (or ``WAITAOF 1 replicas timeout`` with
    ``aof``) on the connection that carried it.

    ``replicas=None`` (the default) waits for every replica the lock's master has online, asked
    from the master (``INFO replication``) now and then and never lowered for the same master
    (known by its replication ID, which a promotion changes): in a split brain an old master
    loses exactly the replica that was promoted, and must not count a grant as synced to the
    one left. A new master behind the same client — promoted, or the old one restarted —
    starts from one fewer than the most any master had rather than from what it reports at once
    (its replicas reattach some time later). A lone server pays nothing. ``replicas=0`` (:data:`SYNC_OFF`) turns it off.
    ``timeout`` is in seconds (default 1 s: a replica that is up acknowledges within a round
    trip plus its lag; a second runs out only when one is down or far behind)."""

    replicas: Optional[int] = None
    timeout: Number = 1.0
    aof: bool = False

    def wait_command(self, replicas: int) -> List[Any]:
        """``WAIT replicas timeout-ms``, or ``WAITAOF 1 replicas timeout-ms``."""
        ms = to_ms(self.timeout, "sync timeout")
        return ["WAITAOF", 1, replicas, ms] if self.aof else ["WAIT", replicas, ms]

    def acked(self, reply: Any) -> int:
        """How many replicas a ``WAIT`` / ``WAITAOF`` reply says have the grant."""
        if self.aof:
            local, replicas = (int(n) for n in reply)
            return replicas if local >= 1 else 0
        return int(reply)


#: No syncing: a grant is returned as soon as the master made it.
SYNC_OFF = Sync(replicas=0)


class NotReplicatedError(LockError):
    """The lock was granted, but fewer replicas than wanted had the grant within the sync
    timeout; the lock released it (owner-checked). Not "busy": the lock was free, the replicas
    were not there."""

    def __init__(self, acked: int, wanted: int) -> None:
        super().__init__(f"the grant reached {acked} of the {wanted} replicas wanted; released")
        self.acked = acked
        self.wanted = wanted


#: How long what a master said of its replicas is used before it is asked again, in seconds.
REPLICAS_REFRESH = 5.0


class Learned:
    """How many replicas the master of a redis-py client has: the most it reported online
    under its current replication ID, asked again every :data:`REPLICAS_REFRESH` seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replication_id: Optional[str] = None
        self._replicas = 0
        self._most = 0  # the most replicas any master of this client had
        self._asked_at: Optional[float] = None

    def fresh(self) -> Optional[int]:
        """The count, if it was asked recently enough."""
        with self._lock:
            recent = self._asked_at is not None and time.monotonic() - self._asked_at < REPLICAS_REFRESH
            return self._replicas if recent else None

    def heard(self, info: Dict[str, Any]) -> int:
        """Takes note of ``INFO replication`` (as redis-py parses it) and returns the count."""
        replication_id = text(info.get("master_replid"))
        online = 0
        if text(info.get("role")) == "master":
            online = sum(1 for key, value in info.items()
                         if str(key).startswith("slave") and isinstance(value, dict)
                         and text(value.get("state")) == "online")
        with self._lock:
            if replication_id != self._replication_id:
                # A new master here starts from one fewer than the last (see Sync).
                self._replication_id, self._replicas = replication_id, max(self._most - 1, 0)
            self._replicas = max(self._replicas, online)
            self._most = max(self._most, self._replicas)
            self._asked_at = time.monotonic()
            return self._replicas

    def ask_again(self) -> None:
        """The next grant asks the master again (keeping the count for the same master)."""
        with self._lock:
            self._asked_at = None


_LEARNED: "weakref.WeakKeyDictionary[Any, Learned]" = weakref.WeakKeyDictionary()
_LEARNED_BY_NAME: Dict[str, Learned] = {}
_LEARNED_LOCK = threading.Lock()


def learned(place: Any) -> Learned:
    """What was learned of the master behind a connection pool, or a cluster node named
    ``host:port`` (shared by every lock on it)."""
    with _LEARNED_LOCK:
        table = _LEARNED_BY_NAME if isinstance(place, str) else _LEARNED
        return table.setdefault(place, Learned())


class Master(NamedTuple):
    """The master a lock lives on: one server, or in Redis Cluster the master of the lock's
    slot."""

    #: What opens a connection of the lock's own to it (a wait, a grant to sync).
    connection_class: Any
    connection_kwargs: dict
    #: What its replica count is learned under: its connection pool, or its cluster node's
    #: ``host:port``.
    place: Any
    #: ``INFO replication`` from it (a coroutine for ``redis.asyncio``).
    info: Callable[[], Any]


def is_cluster(redis: Any) -> bool:
    """True for a redis-py ``RedisCluster`` (sync or asyncio)."""
    return hasattr(redis, "get_node_from_key")


#: How many ``MOVED`` / ``ASK`` redirections a grant on a connection of its own follows.
REDIRECTS = 5


def new_owner() -> str:
    """A new owner: a random UUID (v4) in 32 hex digits, as redis-py's tokens are."""
    return uuid.uuid4().hex


def to_ms(seconds: Number, what: str = "timeout") -> int:
    """``seconds`` (a float or int, as redis-py takes times) in whole milliseconds, at least 1.

    Raises ``LockError`` for zero, a negative time, or less than a millisecond."""
    ms = int(seconds * 1000)
    if ms < 1:
        raise LockError(f"{what} must be at least 0.001 s, not {seconds!r}")
    return ms


def wait_ms(left: Optional[Number]) -> int:
    """The ``WAIT`` argument of ``LOCK.ACQUIRE`` for ``left`` seconds: whole ms, at least 1;
    0 (no limit) for ``None``."""
    return 0 if left is None else max(int(left * 1000), 1)


def wait_connection_kwargs(connection_kwargs: dict, wait: Optional[Number]) -> dict:
    """The arguments of a connection of its own for a wait of ``wait`` seconds (``None``: no
    limit): the client's own settings (host, TLS, protocol, ``decode_responses``, ...), a socket
    timeout longer than the wait, and no retries — a retried wait would queue again, or fail
    a lock the first try got."""
    kwargs = dict(connection_kwargs)
    kwargs["socket_timeout"] = None if wait is None else wait + WAIT_MARGIN
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs.pop("retry_on_timeout", None)
    kwargs.pop("retry_on_error", None)
    return kwargs


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
    (the owner), the fencing token, and the watchdog."""

    token: Any = None
    fencing_token: Optional[int] = None
    fencing_tokens: Optional[List[int]] = None
    keeper: Any = None


class Shared:
    """What one holder keeps when ``thread_local=False``: the same fields, for every thread."""

    token: Any = None
    fencing_token: Optional[int] = None
    fencing_tokens: Optional[List[int]] = None
    keeper: Any = None


class TaskLocal:
    """What one holder (one asyncio task, with ``thread_local=True``) keeps: the fields of
    :class:`Local`, in a context variable. The tasks of one thread share a ``threading.local``,
    so with it two tasks on one lock would overwrite each other's owner, and one would release
    the other's holding; each task runs in a context of its own. A task started by a holder
    starts with a copy of what the holder kept then."""

    _FIELDS = ("token", "fencing_token", "fencing_tokens", "keeper")

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

    def _held(self, owner: Any, reply: Any) -> None:
        """Keeps a grant: ``owner`` and the tokens of ``LOCK.ACQUIRE``'s (or a set's) reply."""
        tokens = [int(token) for token in reply] if isinstance(reply, list) else [int(reply)]
        self.local.token = owner
        self.local.fencing_token = max(tokens)
        self.local.fencing_tokens = tokens

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

    def _own_connection_kwargs(
        self, master: Master, left: Optional[Number], replicas: int, redirect: Any = None
    ) -> dict:
        """A connection of its own to ``master`` (or to the ``(host, port)`` an ``ASK`` named)
        for a grant: a wait of ``left`` seconds (``None``: no limit) and, with ``replicas`` to
        sync, the ``WAIT`` after it."""
        if left is not None and replicas:
            left += self.sync.timeout
        kwargs = wait_connection_kwargs(master.connection_kwargs, left)
        if redirect is not None:
            kwargs["host"], kwargs["port"] = redirect
        return kwargs

    def _not_synced(self, acked: int, wanted: int, master: Master) -> Optional[NotReplicatedError]:
        """The error for a grant that reached ``acked`` of ``wanted`` replicas, or ``None``."""
        if acked >= wanted:
            return None
        learned(master.place).ask_again()
        return NotReplicatedError(acked, wanted)

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
