"""The dedicated connections of the sync and asyncio lock classes: per user client, per master,
a bounded **wait pool** (blocking acquires, which hold a connection while they wait in the
server) and a bounded **sync pool** (grants and renewals, sent in batches, each holding a
connection until the server synced it, see :class:`leasehold._protocol.Batch`) — two, so that waiters can never starve a holder's renewal. Both are
redis-py's ``BlockingConnectionPool`` for the sync classes, and a lighter pool of
``redis.asyncio`` connections for the asyncio ones (``leasehold.asyncio.BudgetedPool``), made
from the user's own connection settings; kept beside them is the client's session on each master,
with a connection of its own (:func:`configure_sessions`)."""

from __future__ import annotations

import os
import threading
import weakref
from contextvars import ContextVar
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from redis.backoff import NoBackoff
from redis.exceptions import LockError
from redis.retry import Retry

from ._protocol import Batches, Number, SessionSettings, is_cluster, to_ms

#: Connections in a client's wait pool, per master, unless :func:`configure_pools` says
#: otherwise: how many blocking acquires wait in the server at once; more queue for one.
WAIT_POOL_SIZE = 32

#: Connections in a client's sync pool, per master, unless :func:`configure_pools` says
#: otherwise: how many synced round trips are in flight at once (each holds its connection
#: until the server replied, up to its sync timeout) — the batches of grants and renewals
#: (two at most, :data:`leasehold._protocol.SENDERS`) and guarded commands; more queue for one.
SYNC_POOL_SIZE = 16

#: How long, in seconds, the caller now borrowing may queue for a connection of a full pool
#: (``None``: until one is free): its own budget, not the pool's.
QUEUE_BUDGET: ContextVar[Optional[float]] = ContextVar("leasehold_queue_budget", default=None)

#: How close to its deadline, in seconds, a caller that got no connection counts as having
#: queued out: an asyncio timer may fire up to the loop's clock resolution early.
QUEUE_SLACK = 0.001


#: A connection lent again after lying idle this long, in seconds, is first checked for a close
#: the server (its ``timeout``), a proxy or a firewall made meanwhile; one in steady use is not.
IDLE_CHECK = 30.0


def pooled_connection_kwargs(connection_kwargs: dict) -> dict:
    """The arguments of a dedicated connection: the client's own (host, TLS, password, db,
    protocol, ``decode_responses``, timeouts for connecting, ...) and no retries — a retried
    wait would queue again, or fail a lock the first try got. How long a reply may take is the
    caller's, per round trip (the client's socket timeout bounds only connecting and, in the
    sync client, the rest of a reply that has begun to arrive)."""
    kwargs = dict(connection_kwargs)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs.pop("retry_on_timeout", None)
    kwargs.pop("retry_on_error", None)
    return kwargs


def session_connection_kwargs(connection_kwargs: dict, timeout: float) -> dict:
    """The arguments of a session's connection: those of a dedicated one
    (:func:`pooled_connection_kwargs`), connecting within ``timeout`` seconds (the session's
    grace) at the most, and answering within it — a reply later than that is of no use to the
    heartbeat, and one sooner than the client's own socket timeout is not needed."""
    kwargs = pooled_connection_kwargs(connection_kwargs)
    given = kwargs.get("socket_connect_timeout")
    kwargs["socket_connect_timeout"] = timeout if given is None else min(given, timeout)
    kwargs["socket_timeout"] = timeout
    return kwargs


class Master(NamedTuple):
    """The master a lock lives on: the one server of a client, or in Redis Cluster the master
    of the lock's slot (or the one an ``ASK`` names)."""

    #: ``host:port`` of a cluster node; ``None`` for a client's one server.
    node: Optional[str]
    #: What the dedicated connections to it are made with.
    connection_class: Any
    connection_kwargs: dict


class Pools:
    """What the lock classes keep beside one user client: per master, its wait pool and sync
    pool and the client's session (made on first use)."""

    def __init__(self) -> None:
        self.sizes = {"wait": WAIT_POOL_SIZE, "sync": SYNC_POOL_SIZE}
        self.sessions = SessionSettings()
        self._pools: Dict[Tuple[str, Optional[str]], Any] = {}
        self._sessions: Dict[Optional[str], Any] = {}
        self._batches: Dict[Tuple[Optional[str], bool], Batches] = {}
        self._lock = threading.Lock()

    def configure_sessions(self, settings: SessionSettings) -> None:
        """Sets the sessions to come (see :func:`configure_sessions`)."""
        with self._lock:
            if self._sessions:
                raise LockError("configure_sessions must come before the first lock on this client")
            self.sessions = settings

    def session(self, master: Master, session_class: Callable[..., Any]) -> Any:
        """The client's session on ``master``, made with ``session_class(master, settings)``
        on first use — and again in a child process (``os.fork``): a session's connection and
        threads are its process's; ``None`` when sessions are off."""
        # Without the lock when it is made (a dict read is atomic): every write asks.
        session = self._sessions.get(master.node)
        if session is not None and session.pid == os.getpid() and self.sessions.enabled:
            return session
        with self._lock:
            if not self.sessions.enabled:
                return None
            session = self._sessions.get(master.node)
            if session is None or session.pid != os.getpid():
                session = session_class(master, self.sessions)
                self._sessions[master.node] = session
            return session

    def resize(self, wait: int, sync: int) -> None:
        """Sets the sizes of the pools to come (see :func:`configure_pools`)."""
        if wait < 1 or sync < 1:
            raise LockError(f"pools need at least 1 connection each, not wait={wait} sync={sync}")
        with self._lock:
            if self._pools:
                raise LockError("configure_pools must come before the first lock on this client")
            self.sizes = {"wait": wait, "sync": sync}

    def pool(self, kind: str, master: Master, pool_class: Callable[..., Any]) -> Any:
        """The ``kind`` (``"wait"`` or ``"sync"``) pool of ``master``, made with
        ``pool_class`` (taking ``max_connections``, ``connection_class`` and the connections'
        arguments) on first use."""
        pool = self._pools.get((kind, master.node))  # a dict read is atomic: made under the lock
        if pool is not None:
            return pool
        with self._lock:
            pool = self._pools.get((kind, master.node))
            if pool is None:
                pool = pool_class(max_connections=self.sizes[kind],
                                  connection_class=master.connection_class,
                                  **pooled_connection_kwargs(master.connection_kwargs))
                self._pools[(kind, master.node)] = pool
            return pool

    def batches(self, master: Master, untied: bool, off: bool) -> Batches:
        """The writes of ``master`` waiting to go in a batch (see
        :class:`leasehold._protocol.Batches`): those tied to a session, or (``untied``) those tied
        to none, which go only on a connection bound to none; synced ones, or (``off``) those
        with syncing off, which go without ``LOCK.SYNC``."""
        key = (master.node, untied, off)
        batches = self._batches.get(key)  # a dict read is atomic: made once, under the lock
        if batches is None:
            with self._lock:
                batches = self._batches.setdefault(key, Batches())
        return batches

    def drain(self) -> Tuple[List[Any], List[Any]]:
        """Forgets the pools and sessions made so far (the next lock makes new ones) and
        returns the pools, to be disconnected, and the sessions, to be closed."""
        with self._lock:
            pools = list(self._pools.values())
            sessions = list(self._sessions.values())
            self._pools.clear()
            self._sessions.clear()
            self._batches.clear()
            return pools, sessions


_POOLS: "weakref.WeakKeyDictionary[Any, Pools]" = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def owner_of_pools(redis: Any) -> Any:
    """What the pools are kept beside: a cluster client itself, or a client's connection pool
    (so every ``Redis`` made on one ``ConnectionPool`` shares them, as it shares that pool)."""
    return redis if is_cluster(redis) else redis.connection_pool


def pools_of(redis: Any) -> Pools:
    """The pools of a user client (sync or asyncio, one server or a cluster)."""
    owner = owner_of_pools(redis)
    with _POOLS_LOCK:
        pools = _POOLS.get(owner)
        if pools is None:
            pools = _POOLS[owner] = Pools()
        return pools


def configure_pools(redis: Any, *, wait: int = WAIT_POOL_SIZE, sync: int = SYNC_POOL_SIZE) -> None:
    """Sets the sizes of the dedicated connection pools the lock classes use with ``redis`` (a
    ``redis.Redis``, ``redis.asyncio.Redis`` or either ``RedisCluster``; clients made on one
    ``ConnectionPool`` share them): ``wait`` connections for blocking acquires that wait in
    the server (default 32) and ``sync`` connections for grants and renewals (default 16),
    each per master. A synced write holds its connection until the
    server replied — once the in-sync replicas acknowledged it, or after
    ``lock.sync-timeout-ms`` (1 s by default) with ``NOREPLICAS``. With the in-sync set and no
    AOF (the default ``Sync()``), the grants and renewals sent at the same time go together on
    one connection (``NOSYNC`` each, then one ``LOCK.SYNC``; with ``SYNC_OFF`` the same
    without it), at most two such senders per master at once, so they take two of its
    connections; a guarded or fenced command, and a
    write with ``Sync(replicas=n)`` or ``aof``, takes one of its own. When a pool is full, a
    caller queues for a connection within its own budget: a blocking acquire within its
    ``blocking_timeout`` (then it returns ``False``), a grant or renewal within the sync
    timeout (``Sync.timeout``; then it raises :class:`leasehold.NotReplicatedError`, nothing
    sent).

    Call it before the first lock on ``redis`` is used (or after ``close_pools``):
    ``LockError`` while its pools exist, or for a size below 1."""
    pools_of(redis).resize(wait, sync)


def configure_sessions(redis: Any, *, enabled: bool = True, grace: Optional[Number] = None) -> None:
    """Sets how the lock classes tie holdings to a **session** with ``redis`` (a
    ``redis.Redis``, ``redis.asyncio.Redis`` or either ``RedisCluster``; clients made on one
    ``ConnectionPool`` share it). Sessions are on by default.

    With sessions on, the client opens one session per master (``LOCK.SESSION OPEN``) at its
    first acquire, on a connection of its own that no pool lends out (named
    ``leasehold-session`` in ``CLIENT LIST``), and every grant and renewal is tied to it: the
    server releases the client's holdings ``grace`` after that connection closes — a holder
    process that crashed (``kill -9``) hands its locks on after the grace, not after their
    leases. Each connection of the wait and sync pools is bound to the session once
    (``LOCK.SESSION USE id``, sent in the round trip of its first grant or renewal, which also
    names the session), and again after the session is replaced by a new one; its grants and
    renewals then carry no ``SESSION id`` — the server ties them, and refuses them with ``ERR
    no such session`` once the session ended, as if they named it; with ``Sync`` off
    (``SYNC_OFF``) grants and renewals go on the sync pool too. A grant or renewal
    tied to no session (none could be had) goes only on a pooled connection bound to none: one
    bound is reconnected first. A module without ``USE`` refuses it once per connection, whose
    writes then name the session. A
    heartbeat (``LOCK.SESSION ATTACH``) every third of the grace keeps the session attached,
    reconnecting when the connection dropped, so a blip shorter than the grace loses nothing.
    The holder learns first: a holding counts (``lease_end``) only until the send time of the
    last heartbeat answered plus the grace, less 1% and 2 ms; when that passes without a newer
    one its ``lost`` is set, before the server can hand it over. After a failover (the new
    master has no sessions) the client opens a new session and renews every holding with it
    (to the lease it has left); one refused is lost. Each session costs a connection, and a
    heartbeat and a watcher thread (tasks of the event loop with ``leasehold.asyncio``), which
    stop after 10 s with no holding and no acquire, until the next acquire (it attaches the
    session first).

    ``enabled=False`` turns sessions off: holdings end with their leases alone, as before.
    ``grace`` is in seconds (default ``None``: the server's, ``lock.session-grace-ms``, 3 s
    unless configured), sent as whole ms; the server takes 0.1 s to
    ``lock.session-max-grace-ms`` (60 s), else the first acquire raises its error.

    Call it before the first lock on ``redis`` is used (or after ``close_pools``):
    ``LockError`` once a session exists, or for a grace under 0.1 s."""
    grace_ms = None if grace is None else to_ms(grace, "grace")
    if grace_ms is not None and grace_ms < 100:
        raise LockError(f"grace must be at least 0.1 s, not {grace!r}")
    pools_of(redis).configure_sessions(SessionSettings(bool(enabled), grace_ms))


def redirected(master: Master, host: str, port: int) -> Master:
    """The cluster master an ``ASK`` named instead of ``master``: the same settings, another
    address."""
    return Master(f"{host}:{port}", master.connection_class,
                  {**master.connection_kwargs, "host": host, "port": port})
