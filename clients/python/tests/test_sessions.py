"""Sessions (``leasehold.configure_sessions``), sync and asyncio, on a real server of their own
with a grace of 500 ms: a holder process killed with ``kill -9`` hands its lock on within the
grace; a session connection killed (``CLIENT KILL``) is attached again in time and keeps every
holding; a holder cut off for longer than the grace (a TCP proxy that drops its connections)
is told it lost the lock before the server hands it on; after a restart (the server has no
such session) the holdings are renewed with a new session; ``close_pools`` releases them at
once; and with sessions off nothing is tied. The connections of the pools are bound to the
session (``LOCK.SESSION USE``) once each, and again when it is replaced; what goes on them
tied then names no session."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import List, Optional, Tuple

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import (ROOT, Waiter, aclose, as_map, free_port, info, probe, wait_until,
                      waiters)

GRACE = 0.5


#: A server of its own for each test: ``CLIENT LIST`` shows only its session connections. On
#: every redis-py version tested (scripts/python-tests.sh).
pytestmark = [pytest.mark.own_server, pytest.mark.every_redis_py]


def session_connections(admin) -> list:
    """The ids of the session connections (``CLIENT SETNAME leasehold-session``)."""
    return [client["id"] for client in admin.client_list() if client["name"] == "leasehold-session"]


def sessions_client(port: int, grace: float = GRACE, **kwargs) -> redis.Redis:
    client = redis.Redis(port=port, **kwargs)
    leasehold.configure_sessions(client, grace=grace)
    return client


#: The grace of the tests that wait out several graces: three times :data:`GRACE`, so that a
#: heartbeat late on a loaded machine (``make test`` runs four files at once beside Sentinel
#: tests) does not end the session they keep. They wait longer than it still.
LONG_GRACE = GRACE * 3


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
        admin = probe(port)
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
    await aclose(client)


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
    await aclose(client)


def test_a_blocking_acquire_keeps_its_session_attached_however_long_it_waits(
        server, admin, name, monkeypatch):
    monkeypatch.setattr(leasehold._protocol, "IDLE_AFTER", 0.1)
    holder = leasehold.Lock(redis.Redis(port=server.port), name, timeout=30)
    assert holder.acquire()
    waiter = Waiter(sessions_client(server.port, grace=LONG_GRACE), name)
    wait_until(lambda: waiters(admin, name) == 1)
    time.sleep(LONG_GRACE * 1.4)  # past the idle time and the grace: the heartbeat goes on
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
    leasehold.asyncio.configure_sessions(client, grace=LONG_GRACE)
    waiter = leasehold.asyncio.Lock(client, name, timeout=30, blocking_timeout=10,
                                    thread_local=False)
    waiting = asyncio.ensure_future(waiter.acquire())
    while waiters(admin, name) != 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(LONG_GRACE * 1.4)
    token = holder.fencing_token
    holder.release()
    assert await waiting
    assert waiter.fencing_token == token + 1
    await waiter.release()
    await aclose(client)


#: The commands a session ties what they take or renew to.
TYING = ("LOCK.ACQUIRE", "LOCK.RENEW", "LOCK.MACQUIRE", "LOCK.MRENEW")


class Monitor:
    """What the server is sent (``MONITOR``): each command with the port of the connection that
    sent it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.monitor = redis.Redis(port=port).monitor().__enter__()
        self.seen: List[Tuple[str, str]] = []
        threading.Thread(target=self._run, daemon=True).start()
        self.mark()

    def _run(self) -> None:
        while True:
            try:
                command = self.monitor.next_command()
            except ValueError:
                # A line redis-py before 7.0 cannot parse, read whole: a command with no client
                # address — the module's own INFO, which Redis 8 and Valkey show.
                continue
            except Exception:
                return  # closed
            self.seen.append((command["client_port"], command["command"]))

    def mark(self) -> None:
        """Waits until every command sent before has been seen."""
        marker = uuid.uuid4().hex
        with redis.Redis(port=self.port) as client:
            client.echo(marker)
        wait_until(lambda: any(marker in command for _, command in self.seen))

    def commands(self, *verbs: str) -> List[Tuple[str, List[str]]]:
        """The commands seen so far beginning with one of ``verbs``, split in words."""
        self.mark()
        return [(port, command.split()) for port, command in self.seen
                if command.split()[0] in verbs
                or command.startswith("LOCK.SESSION") and "LOCK.SESSION" in verbs]

    def close(self) -> None:
        self.monitor.__exit__(None, None, None)


@pytest.fixture
def monitor(server):
    watching = Monitor(server.port)
    yield watching
    watching.close()


def named(command: List[str]) -> Optional[str]:
    """The session a command names (``SESSION id``), or ``None``."""
    return command[command.index("SESSION") + 1] if "SESSION" in command else None


def test_each_pooled_connection_is_bound_once_and_its_tied_writes_name_no_session(
        server, admin, monitor, name):
    client = sessions_client(server.port)
    leasehold.configure_pools(client, wait=1, sync=1)
    locks = [leasehold.Lock(client, f"{name}:{i}", timeout=30) for i in range(3)]
    for lock in locks:
        assert lock.acquire(blocking=False) and lock.reacquire()
    waited = leasehold.Lock(client, name + ":waited", timeout=30, blocking_timeout=1)
    assert waited.acquire() and waited.reacquire()
    several = leasehold.MultiLock(client, [name + ":a", name + ":b"], timeout=30)
    assert several.acquire(blocking=False) and several.reacquire()
    session = info(admin, locks[0].name)["session"]
    assert session is not None
    for key in [lock.name for lock in locks] + [name + ":waited", name + ":a", name + ":b"]:
        assert info(admin, key)["session"] == session, "tied"
    uses = monitor.commands("LOCK.SESSION")
    uses = [(port, command) for port, command in uses if command[1] == "USE"]
    assert [command for _, command in uses] == [["LOCK.SESSION", "USE", session]] * 2, \
        "once on the sync connection, once on the wait connection"
    bound = {port for port, _ in uses}
    assert len(bound) == 2
    writes = monitor.commands(*TYING)
    assert len(writes) == 3 * 2 + 2 + 2
    assert all(port in bound for port, _ in writes), "tied writes go on bound connections"
    naming = [command for _, command in writes if named(command) is not None]
    assert [named(command) for command in naming] == [session, session], \
        "only the first write on each connection names the session, in the round trip of its USE"
    for lock in (*locks, waited, several):
        lock.release()
    leasehold.close_pools(client)


def test_a_session_closed_under_the_client_is_replaced_and_the_connection_bound_again(
        server, admin, monitor, name):
    client = sessions_client(server.port)
    leasehold.configure_pools(client, wait=1, sync=1)
    first = leasehold.Lock(client, name, timeout=30)
    assert first.acquire(blocking=False)
    old = info(admin, name)["session"]
    assert admin.execute_command("LOCK.SESSION", "CLOSE", old) == 1, "released by the server"
    second = leasehold.Lock(client, name + ":2", timeout=30)
    assert second.acquire(blocking=False)
    new = info(admin, second.name)["session"]
    assert new not in (None, old), "tied to a new session"
    wait_until(first.lost.is_set, timeout=GRACE)
    third = leasehold.Lock(client, name + ":3", timeout=30)
    assert third.acquire(blocking=False) and third.reacquire()
    assert info(admin, third.name)["session"] == new
    uses = [(port, command[2]) for port, command in monitor.commands("LOCK.SESSION")
            if command[1] == "USE"]
    assert [id for _, id in uses] == [old, new] and uses[0][0] == uses[1][0], \
        "the sync connection, bound to the old session, is bound to the new one"
    writes = monitor.commands(*TYING)
    assert named(writes[-1][1]) is None and named(writes[-2][1]) is None, \
        "the third lock's acquire and renewal name no session"
    for lock in (second, third):
        lock.release()
    leasehold.close_pools(client)


def test_a_write_tied_to_no_session_never_goes_on_a_bound_connection(
        server, admin, name, monkeypatch):
    client = sessions_client(server.port)
    leasehold.configure_pools(client, wait=1, sync=1)
    tied = leasehold.Lock(client, name, timeout=30)
    assert tied.acquire(blocking=False)
    session = info(admin, name)["session"]
    # No session to be had (as when the reply to OPEN came after its deadline): not tied.
    monkeypatch.setattr(leasehold.lock.Session, "term", lambda self: None)
    untied = leasehold.Lock(client, name + ":untied", timeout=30, blocking_timeout=1)
    assert untied.acquire(blocking=False) and untied.reacquire()
    waited = leasehold.Lock(client, name + ":waited", timeout=30, blocking_timeout=1)
    assert waited.acquire()
    for lock in (untied, waited):
        assert info(admin, lock.name)["session"] is None, "on a connection bound to none"
        assert lock.local.lease.term is None
    monkeypatch.undo()
    again = leasehold.Lock(client, name + ":again", timeout=30)
    assert again.acquire(blocking=False)
    assert info(admin, again.name)["session"] == session, "bound again"
    for lock in (tied, untied, waited, again):
        lock.release()
    leasehold.close_pools(client)


async def test_asyncio_connections_are_bound_once_and_again_for_a_new_session(
        server, admin, monitor, name):
    client = redis.asyncio.Redis(port=server.port)
    leasehold.asyncio.configure_sessions(client, grace=GRACE)
    leasehold.asyncio.configure_pools(client, wait=1, sync=1)
    first = leasehold.asyncio.Lock(client, name, timeout=30)
    assert await first.acquire(blocking=False) and await first.reacquire()
    waited = leasehold.asyncio.Lock(client, name + ":waited", timeout=30, blocking_timeout=1)
    assert await waited.acquire()
    old = info(admin, name)["session"]
    assert info(admin, waited.name)["session"] == old
    assert admin.execute_command("LOCK.SESSION", "CLOSE", old) == 2
    second = leasehold.asyncio.Lock(client, name + ":2", timeout=30)
    assert await second.acquire(blocking=False) and await second.reacquire()
    new = info(admin, second.name)["session"]
    assert new not in (None, old)
    uses = [(port, command[2]) for port, command in monitor.commands("LOCK.SESSION")
            if command[1] == "USE"]
    assert [id for _, id in uses] == [old, old, new], \
        "the sync and the wait connection, then the sync one again"
    pooled = {port for port, _ in uses}
    writes = [named(command) for port, command in monitor.commands(*TYING) if port in pooled]
    refused = [None] if len(writes) == 6 else []  # unless the heartbeat found the session gone
    assert writes == [old, None, old, *refused, new, None]
    await second.release()
    await aclose(client)
