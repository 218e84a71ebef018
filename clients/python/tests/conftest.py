"""A real redis-server with the leasehold module for the tests: on a free loopback port, in a
temp dir, killed at the end. ``LEASEHOLD_SERVER`` names the server binary (default
``redis-server``), ``LEASEHOLD_MODULE`` the module (default the debug build of this repo)."""

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import List, NamedTuple, Optional, Sequence, Tuple

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import leasehold
import leasehold.asyncio

ROOT = Path(__file__).resolve().parents[3]

#: How long the masters of :func:`group` hold a synced write for their in-sync replicas
#: (``lock.sync-timeout-ms``), in ms: a replica that is up on this machine acknowledges well
#: within it, and a refusal costs little time.
SYNC_TIMEOUT_MS = 200

#: Grants and renewals synced to the in-sync replicas by such a master, queueing for a sync
#: connection for at most as long.
QUICK = leasehold.Sync(timeout=SYNC_TIMEOUT_MS / 1000)

#: Why such a master refused a grant or renewal (``NOREPLICAS``, the reason of
#: :class:`leasehold.NotReplicatedError`) when a member of its in-sync set did not acknowledge it.
ACKED_LATE = f"not every in-sync replica acknowledged within {SYNC_TIMEOUT_MS} ms"


def pytest_collection_modifyitems(items) -> None:
    """Files marked ``long`` first, the order of the rest kept: pytest-xdist hands whole files
    to its workers in collection order (scripts/python-tests.sh passes ``--dist loadfile
    --no-loadscope-reorder``), and a long file handed out last would run on alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``args`` are the server's settings, ``module_args`` the module's (``name value`` pairs,
    e.g. ``("min-insync-replicas", "2")``)."""

    def __init__(self, *args: str, module_args: Sequence[str] = ()) -> None:
        self.dir = tempfile.mkdtemp(prefix="leasehold-py-")
        self.log = open(Path(self.dir) / "server.log", "w")
        # A port may be taken between free_port() and the server's bind (by a connection, or a
        # server another test process started): the server exits, and a new port is tried.
        for _ in range(5):
            self.port = free_port()
            if self._start(args, module_args):
                return
        raise RuntimeError(Path(self.dir, "server.log").read_text())

    def _start(self, args: Sequence[str], module_args: Sequence[str]) -> bool:
        """Starts the server on ``self.port``; True once its own process answers (another
        server on the port would answer ``PING`` too), False if the port was taken."""
        binary = os.environ.get("LEASEHOLD_SERVER", "redis-server")
        module = os.environ.get("LEASEHOLD_MODULE", str(ROOT / "target" / "debug" / "libleasehold.so"))
        logged_before = os.path.getsize(Path(self.dir, "server.log"))
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--loadmodule", module, *module_args, *args],
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while True:
            try:
                with probe(self.port) as client:
                    if client.ping() and client.info("server")["process_id"] == self.process.pid:
                        return True
            except redis.ConnectionError:
                pass
            if self.process.poll() is not None:
                with open(Path(self.dir, "server.log")) as log:
                    log.seek(logged_before)
                    if "Address already in use" in log.read():
                        return False
                raise RuntimeError(Path(self.dir, "server.log").read_text())
            if time.monotonic() > deadline:
                raise RuntimeError(Path(self.dir, "server.log").read_text())
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Kills the server (``SIGKILL``) for good."""
        self.process.kill()
        self.process.wait()
        self.log.close()

    def signal(self, number: int) -> None:
        """Sends a signal (``signal.SIGSTOP``, ``signal.SIGCONT``) to the server process."""
        self.process.send_signal(number)


def probe(port: int) -> redis.Redis:
    """A client that asks whether a server is up and answers at once: without redis-py's
    retries (6.0 and later retry a refused connection 3 times, backing off up to seconds)."""
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0))


def cluster_nodes():
    """Three masters with a replica each (``redis-cli --cluster create --cluster-replicas 1``),
    the slots covered, every replica online; the servers, masters first."""
    nodes = [Server("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "5000", "--cluster-port", str(free_port()),
                    "--repl-diskless-sync-delay", "0") for _ in range(6)]
    created = subprocess.run(["redis-cli", "--cluster", "create",
                              *[f"127.0.0.1:{node.port}" for node in nodes],
                              "--cluster-replicas", "1", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stdout + created.stderr

    def ready(node):
        client = redis.Redis(port=node.port)
        if "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO").decode():
            return False
        return client.info("replication")["role"] == "slave" or in_sync(node, 1)

    wait_until(lambda: all(ready(node) for node in nodes), timeout=60)
    return nodes


def insync_replicas(master: Server) -> int:
    """The members of ``master``'s in-sync replica set (``INFO lock``: Redis prefixes the
    module's fields with its name); -1 while it does not list them (for up to 0.2 s after
    starting a master calls itself a replica there)."""
    return int(redis.Redis(port=master.port).info("lock").get("lock_insync_replicas", -1))


def in_sync(master: Server, replicas: int) -> bool:
    """Whether ``master``'s in-sync set has ``replicas`` members, and they acknowledged its
    offset. (A replica may join the set before its first acknowledgement, which after a
    diskless sync comes with its once-a-second ``REPLCONF ACK``: until then no ``WAIT`` counts
    it.)"""
    offset, acked = redis.Redis(port=master.port).execute_command("LOCK.INSYNC")[:2]
    return insync_replicas(master) == replicas and acked >= offset


def group(replicas: int, module_args: Sequence[str] = ()) -> Tuple[Server, List[Server]]:
    """A master and ``replicas`` replicas, every one in the master's in-sync set and
    acknowledging writes; the module loaded with ``module_args`` on each, and
    ``lock.sync-timeout-ms`` :data:`SYNC_TIMEOUT_MS` unless they say otherwise."""
    if "sync-timeout-ms" not in module_args:
        module_args = ("sync-timeout-ms", str(SYNC_TIMEOUT_MS), *module_args)
    # No diskless-sync delay: the replicas sync at once rather than 5 s later.
    master = Server("--repl-diskless-sync-delay", "0", module_args=module_args)
    followers = [Server(module_args=module_args) for _ in range(replicas)]
    for follower in followers:
        redis.Redis(port=follower.port).execute_command("REPLICAOF", "127.0.0.1", master.port)
    wait_until(lambda: in_sync(master, replicas))
    return master, followers


def stop_all(servers: Sequence[Server]) -> None:
    """Stops ``servers``, stopped (``SIGSTOP``) or not."""
    for running in servers:
        running.signal(signal.SIGCONT)
        running.stop()


@pytest.fixture
def replicated():
    """A master and its replica, the replica in the master's in-sync set."""
    master, (replica,) = group(1)
    yield master, replica
    stop_all([master, replica])


@pytest.fixture(scope="session")
def shared_server():
    """The server of one test process, shared by its tests."""
    running = Server()
    yield running
    running.stop()


@pytest.fixture
def server(request):
    """The server a test talks to: its process's shared one — or, for a test marked
    ``own_server``, one of its own, so that ``CLIENT LIST`` and ``CLIENT KILL`` see only its
    connections."""
    if request.node.get_closest_marker("own_server") is None:
        yield request.getfixturevalue("shared_server")
        return
    running = Server()
    yield running
    running.stop()


@pytest.fixture
def name() -> str:
    """A lock name no other test uses."""
    return f"lock:{uuid.uuid4().hex}"


@pytest.fixture
def admin(server):
    """A plain client for checking what the server holds."""
    client = redis.Redis(port=server.port)
    yield client
    client.close()


class StallingProxy:
    """A TCP proxy to the server whose last connection can be stalled: it stays open, but what
    the server sends it is lost, as when a network silently drops one flow's packets."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = port
        self.connections = []
        self.stalled = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            number = len(self.connections)
            self.connections.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, number), daemon=True).start()

    def _pump(self, source, sink, number) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if number is not None and number == self.stalled:
                continue  # lost on the way
            try:
                sink.sendall(data)
            except OSError:
                return

    def stall_last_connection(self) -> None:
        self.stalled = len(self.connections) - 1

    def close(self) -> None:
        close_listener(self.listener)


def close_listener(listener: socket.socket) -> None:
    """Closes a proxy's listening socket, shut down first: that wakes its thread blocked in
    ``accept``, which a close alone does not — it would go on taking connections (a session's
    heartbeat, after its test) to a server that may be gone."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    listener.close()


@pytest.fixture
def proxy(server):
    stalling = StallingProxy(server.port)
    yield stalling
    stalling.close()


def in_threads(target, each: Sequence[tuple]) -> None:
    """Runs ``target(*args)`` for each ``args`` of ``each``, every one in a thread of its own, all
    at once, and waits for them all."""
    threads = [threading.Thread(target=target, args=args) for args in each]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def as_map(reply) -> dict:
    """A reply map (RESP2 or RESP3) with text keys and values."""
    fields = dict(zip(reply[::2], reply[1::2])) if isinstance(reply, list) else reply
    return {text(key): text(value) for key, value in fields.items()}


def text(value):
    """``value`` decoded if it is bytes."""
    return value.decode() if isinstance(value, bytes) else value


def info(admin, name) -> dict:
    """``LOCK.INFO`` of a held lock, as text."""
    return as_map(admin.execute_command("LOCK.INFO", name))


def waiters(admin, name) -> int:
    """How many clients wait for the lock ``name``; -1 when it is free."""
    reply = admin.execute_command("LOCK.INFO", name)
    return -1 if reply is None else int(as_map(reply)["waiters"])


class Holding(NamedTuple):
    """An exclusive lock's holding as the server has it (``LOCK.INFO``)."""

    owner: str
    token: int
    session: Optional[str]


def holding(admin, name) -> Optional[Holding]:
    """Who holds the exclusive lock ``name``, with which fencing token and session; ``None`` when
    it is free."""
    reply = admin.execute_command("LOCK.INFO", name)
    if reply is None:
        return None
    fields = as_map(reply)
    return Holding(fields["owner"], int(fields["token"]), fields["session"])


class Waiter:
    """A lock taken in a thread of its own, blocking (a 30 s lease, waiting up to 10 s): when it
    was granted (``time.monotonic()``) and with which fencing token."""

    def __init__(self, client, name: str) -> None:
        self.lock = leasehold.Lock(client, name, timeout=30, blocking_timeout=10,
                                   thread_local=False)
        self.granted_at: Optional[float] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.lock.acquire():
            self.granted_at = time.monotonic()

    def join(self) -> float:
        """When it was granted; fails the test unless it was within 15 s."""
        self.thread.join(15)
        assert self.granted_at is not None, "granted"
        return self.granted_at


async def aclose(client) -> None:
    """Closes the pools and sessions the lock classes keep beside a ``redis.asyncio`` client
    (``leasehold.asyncio.close_pools``), then the client (``aclose`` since redis-py 5.0.1,
    ``close`` before)."""
    await leasehold.asyncio.close_pools(client)
    await client.aclose() if hasattr(client, "aclose") else await client.close()


def fence(server, name):
    """The fencing token of whoever holds ``name`` on ``server`` (``LOCK.FENCE``)."""
    return redis.Redis(port=server.port).execute_command("LOCK.FENCE", name)


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
        close_listener(self.listener)


@pytest.fixture
def cutting(server):
    proxy = CuttingProxy(server.port)
    yield proxy
    proxy.close()
