"""Sessions (``leasehold.configure_sessions``), sync and asyncio, on a real server of their own
with a grace of 500 ms: a holder process killed with ``kill -9`` hands its lock on within the
grace; a session connection killed (``CLIENT KILL``) is attached again in time and keeps every
holding; a holder cut off for longer than the grace (a TCP proxy that drops its connections)
is told it lost the lock before the server hands it on; after a restart (the server has no
such session) the holdings are renewed with a new session; ``close_pools`` releases them at
once; and with sessions off nothing is tied."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import ROOT, Server, free_port, wait_until, waiters

GRACE = 0.5


@pytest.fixture
def server():
    """A server of its own: ``CLIENT LIST`` shows only this test's session connections."""
    running = Server()
    yield running
    running.stop()


@pytest.fixture
def admin(server):
    client = redis.Redis(port=server.port)
    yield client
    client.close()


def as_map(reply) -> dict:
    """A reply map (RESP2 or RESP3) with text keys and values."""
    fields = dict(zip(reply[::2], reply[1::2])) if isinstance(reply, list) else reply
    return {key.decode(): value.decode() if isinstance(value, bytes) else value
            for key, value in fields.items()}


def info(admin, name) -> dict:
    """``LOCK.INFO`` of a lock, as text."""
    return as_map(admin.execute_command("LOCK.INFO", name))


def session_connections(admin) -> list:
    """The ids of the session connections (``CLIENT SETNAME leasehold-session``)."""
    return [client["id"] for client in admin.client_list() if client["name"] == "leasehold-session"]


def sessions_client(port: int, **kwargs) -> redis.Redis:
    client = redis.Redis(port=port, **kwargs)
    leasehold.configure_sessions(client, grace=GRACE)
    return client


class Waiter:
    """A lock taken in a thread of its own, blocking: when it was granted (``time.monotonic()``)
    and with which fencing token."""

    def __init__(self, client, name: str) -> None:
        self.lock = leasehold.Lock(client, name, timeout=30, blocking_timeout=10, thread_local=False)
        self.granted_at: Optional[float] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.lock.acquire():
            self.granted_at = time.monotonic()

    def join(self) -> float:
        self.thread.join(15)
        assert self.granted_at is not None, "granted"
        return self.granted_at


class CuttingProxy:
    """A TCP proxy to the server whose connections can all be cut at once, both ways, and new
    ones refused until :meth:`restore`: the server sees them close, the client cannot reach it."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = port
        self.cut = False
        self.sockets = []
        self.guard = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.guard:
                if self.cut:
                    client.close()
                    continue
                upstream = socket.create_connection(("127.0.0.1", self.target))
                self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source, sink) -> None:
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            except OSError:
                break
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut_all(self) -> None:
        with self.guard:
            self.cut = True
            for end in self.sockets:
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()
            self.sockets = []

    def restore(self) -> None:
        with self.guard:
            self.cut = False

    def close(self) -> None:
        self.cut_all()
        self.listener.close()


@pytest.fixture
def cutting(server):
    proxy = CuttingProxy(server.port)
    yield proxy
    proxy.close()


HOLDER = """
import sys, time
import redis, leasehold
r = redis.Redis(port=int(sys.argv[1]))
leasehold.configure_sessions(r, grace=float(sys.argv[3]))
lock = leasehold.Lock(r, sys.argv[2], timeout=30)
assert lock.acquire()
print(lock.fencing_token, flush=True)
time.sleep(60)
"""


def test_a_killed_holder_process_hands_its_lock_on_within_the_grace(server, admin, name):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(server.port), name, str(GRACE)],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        held_token = int(holder.stdout.readline())
        waiter = Waiter(redis.Redis(port=server.port), name)
        wait_until(lambda: waiters(admin, name) == 1)
        holder.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        granted_after = waiter.join() - killed_at
    finally:
        holder.kill()
        holder.wait()
    # The lease was 30 s: the session's end (the grace after its connection closed) handed it on.
    assert GRACE - 0.05 < granted_after < GRACE + 0.1, f"granted {granted_after:.3f} s after the kill"
    assert waiter.lock.fencing_token > held_token
    assert int(admin.info("lock")["lock_sessions_expired"]) == 1
    waiter.lock.release()


def test_a_killed_session_connection_is_attached_again_and_keeps_the_lock(server, admin, name):
    client = sessions_client(server.port)
    holder = leasehold.Lock(client, name, timeout=30)
    assert holder.acquire()
    session = info(admin, name)["session"]
    assert session is not None and len(session) == 16
    (connection,) = session_connections(admin)
    waiter = Waiter(redis.Redis(port=server.port), name)
    wait_until(lambda: waiters(admin, name) == 1)
    admin.execute_command("CLIENT", "KILL", "ID", connection)
    time.sleep(GRACE + 0.3)
    assert waiter.granted_at is None and waiters(admin, name) == 1, "no hand-over"
    held = info(admin, name)
    assert (held["owner"], held["session"]) == (holder.local.token.decode(), session)
    assert not holder.lost.is_set()
    assert connection not in session_connections(admin), "a new connection attached it"
    assert holder.lease_end > time.monotonic()
    holder.release()
    waiter.join()
    waiter.lock.release()


def test_a_holder_cut_off_longer_than_the_grace_learns_it_lost_first(server, cutting, admin, name):
    holder = leasehold.Lock(sessions_client(cutting.port), name, timeout=30, watchdog=True)
    assert holder.acquire()
    lost, lost_at = holder.lost, []
    watcher = threading.Thread(target=lambda: lost.wait(10) and lost_at.append(time.monotonic()))
    watcher.start()
    waiter = Waiter(redis.Redis(port=server.port), name)
    wait_until(lambda: waiters(admin, name) == 1)
    cutting.cut_all()
    cut_at = time.monotonic()
    granted_at = waiter.join()
    watcher.join()
    assert lost_at, "the holder was told"
    assert lost_at[0] < granted_at, "the holder learns first"
    assert lost_at[0] - cut_at < GRACE and GRACE - 0.05 < granted_at - cut_at < GRACE + 0.1
    assert holder.lease_end <= lost_at[0]
    cutting.restore()
    waiter.lock.release()


def test_every_kind_of_lock_is_tied_and_close_pools_releases_at_once(server, admin, name):
    client = sessions_client(server.port)
    one = leasehold.Lock(client, name, timeout=30)
    reader = leasehold.ReadWriteLock(client, name + ":rw", timeout=30).read
    several = leasehold.MultiLock(client, [name + ":a", name + ":b"], timeout=30, watchdog=True)
    for lock in (one, reader, several):
        assert lock.acquire(blocking=False)
    session = info(admin, name)["session"]
    assert info(admin, name + ":b")["session"] == session
    (reading,) = info(admin, name + ":rw")["owners"]
    assert as_map(reading)["session"] == session
    leasehold.close_pools(client)
    assert admin.exists(name, name + ":rw", name + ":a", name + ":b") == 0, "released at once"
    assert all(lock.lost.is_set() for lock in (one, reader, several))
    assert int(admin.info("lock")["lock_sessions"]) == 0
    assert one.acquire(blocking=False), "a new session"
    assert info(admin, name)["session"] not in (None, session)
    one.release()
    leasehold.close_pools(client)


def test_after_a_restart_the_holdings_are_tied_to_a_new_session(tmp_path, name):
    port = free_port()
    command = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
               "--appendonly", "yes", "--appendfsync", "always", "--loadmodule",
               os.environ.get("LEASEHOLD_MODULE", str(ROOT / "target" / "debug" / "libleasehold.so"))]
    binary = os.environ.get("LEASEHOLD_SERVER", "redis-server")
    start = lambda: subprocess.Popen([binary, *command], stdout=subprocess.DEVNULL)  # noqa: E731
    running = start()
    try:
        admin = redis.Redis(port=port)
        wait_until(lambda: ping(admin))
        client = redis.Redis(port=port)
        leasehold.configure_sessions(client, grace=2)
        holder = leasehold.Lock(client, name, timeout=30)
        kept = leasehold.Lock(client, name + ":kept", timeout=30)
        gone = leasehold.Lock(client, name + ":gone", timeout=30)
        for lock in (holder, kept, gone):
            assert lock.acquire(blocking=False)
        before = info(admin, name)["session"]
        admin.execute_command("LOCK.RELEASE", name + ":gone", gone.local.token)  # unbeknownst
        running.kill()
        running.wait()
        running = start()  # the holdings back from the AOF, no session: it lives in memory only
        wait_until(lambda: ping(admin))
        client.connection_pool.disconnect()  # redis-py's own: not retried without retries
        assert kept.extend(1), "a renewal names a new session"
        after = info(admin, name + ":kept")["session"]
        assert after not in (None, before)
        wait_until(lambda: info(admin, name)["session"] == after, timeout=2)
        assert not holder.lost.is_set() and holder.lease_end > time.monotonic() + 1
        assert gone.lost.is_set(), "refused by the new session: lost"
        for lock in (holder, kept):
            lock.release()
        leasehold.close_pools(client)
    finally:
        running.kill()
        running.wait()


def ping(client) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


def test_with_sessions_off_nothing_is_tied(server, admin, name):
    client = redis.Redis(port=server.port)
    leasehold.configure_sessions(client, enabled=False)
    lock = leasehold.Lock(client, name, timeout=30)
    assert lock.acquire(blocking=False)
    assert info(admin, name)["session"] is None
    assert session_connections(admin) == [] and int(admin.info("lock")["lock_sessions"]) == 0
    client.connection_pool.disconnect()  # the holder's connections close: its lease alone counts
    time.sleep(0.1)
    assert lock.owned() and lock.lease_end > time.monotonic() + 25
    lock.release()
    with pytest.raises(leasehold.LockError):
        leasehold.configure_sessions(redis.Redis(port=server.port), grace=0.01)


async def test_asyncio_a_killed_session_connection_is_attached_again(server, admin, name):
    client = redis.asyncio.Redis(port=server.port)
    leasehold.asyncio.configure_sessions(client, grace=GRACE)
    holder = leasehold.asyncio.Lock(client, name, timeout=30)
    assert await holder.acquire()
    session = info(admin, name)["session"]
    (connection,) = session_connections(admin)
    admin.execute_command("CLIENT", "KILL", "ID", connection)
    await asyncio.sleep(GRACE + 0.3)
    assert info(admin, name)["session"] == session and not holder.lost.is_set()
    assert await holder.owned() and holder.lease_end > time.monotonic()
    await holder.release()
    await leasehold.asyncio.close_pools(client)
    await client.aclose() if hasattr(client, "aclose") else await client.close()


async def test_asyncio_a_holder_cut_off_longer_than_the_grace_learns_it_lost_first(
        server, cutting, admin, name):
    client = redis.asyncio.Redis(port=cutting.port)
    leasehold.asyncio.configure_sessions(client, grace=GRACE)
    holder = leasehold.asyncio.Lock(client, name, timeout=30)
    assert await holder.acquire()
    waiter = Waiter(redis.Redis(port=server.port), name)
    wait_until(lambda: waiters(admin, name) == 1)
    cutting.cut_all()
    await asyncio.wait_for(holder.lost.wait(), GRACE)
    lost_at = time.monotonic()
    granted_at = await asyncio.get_running_loop().run_in_executor(None, waiter.join)
    assert lost_at < granted_at, "the holder learns first"
    cutting.restore()
    waiter.lock.release()
    await leasehold.asyncio.close_pools(client)
    await client.aclose() if hasattr(client, "aclose") else await client.close()


def test_a_blocking_acquire_keeps_its_session_attached_however_long_it_waits(
        server, admin, name, monkeypatch):
    monkeypatch.setattr(leasehold._protocol, "IDLE_AFTER", 0.1)
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    waiter = Waiter(sessions_client(server.port), name)
    wait_until(lambda: waiters(admin, name) == 1)
    time.sleep(GRACE * 4)  # far past the idle time and the grace: the heartbeat goes on
    token = holder.fencing_token
    holder.release()
    waiter.join()
    # The grant that ended the wait counted: it was not released and taken again.
    assert waiter.lock.fencing_token == token + 1
    waiter.lock.release()


async def test_asyncio_a_blocking_acquire_keeps_its_session_attached_however_long_it_waits(
        server, admin, name, monkeypatch):
    monkeypatch.setattr(leasehold._protocol, "IDLE_AFTER", 0.1)
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    client = redis.asyncio.Redis(port=server.port)
    leasehold.asyncio.configure_sessions(client, grace=GRACE)
    waiter = leasehold.asyncio.Lock(client, name, timeout=30, blocking_timeout=10,
                                    thread_local=False)
    waiting = asyncio.ensure_future(waiter.acquire())
    while waiters(admin, name) != 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(GRACE * 4)
    token = holder.fencing_token
    holder.release()
    assert await waiting
    assert waiter.fencing_token == token + 1
    await waiter.release()
    await leasehold.asyncio.close_pools(client)
    await client.aclose() if hasattr(client, "aclose") else await client.close()
