"""What syncing grants to the replicas costs the Python client, on a master with one replica,
with grants synced (the default: on a pooled connection, the server replying once the replica
acknowledged them — ``LOCK.ACQUIRE ... SYNC`` for a grant alone, ``NOSYNC`` each and one
``LOCK.SYNC`` for grants sent at the same time) and not (``SYNC_OFF``: ``NOSYNC``):

- ``acquire+release``: one thread loops ``leasehold.Lock`` ``acquire(blocking=False)`` →
  ``release()``, and redis-py alone sends ``LOCK.ACQUIRE ... SYNC`` (``NOSYNC``) →
  ``LOCK.RELEASE`` (``plain synced``, ``plain not synced``; ``plain synced, tied`` on a
  connection bound to a session, as the package's are), the modes taking turns over ROUNDS
  rounds; the latency of acquire + release;
- ``64 tasks``: 64 asyncio tasks on one ``redis.asyncio`` client (``leasehold.asyncio.Lock``),
  each on a lock of its own, loop acquire + release; with the sync pool as large as the tasks
  (``synced, 64 sync connections``); and redis-py alone with the same commands (``plain``); the
  modes take turns over ROUNDS rounds; their throughput together, and this process's and the
  master's CPU time per iteration;
- ``64 threads``: the same with 64 threads on one ``redis.Redis`` (``leasehold.Lock``);
- ``connections``: the master's ``total_connections_received`` over 1000 synced acquire +
  release (sync client), and over 1000 acquires that wait in the server (8 asyncio tasks
  contending for 2 locks, ``LOCK.ACQUIRE ... WAIT``), each after a warm-up.

Run by ``make bench`` with the master's URL as the argument; prints one JSON object per line:
``{"case": "acquire+release", "mode", "ops_per_s", "p50_ms", "p99_ms"}``,
``{"case": "64 tasks", "mode", "ops_per_s", "client_cpu_us", "server_cpu_us", "client": "asyncio"}``,
``{"case": "64 threads", "mode", "ops_per_s", "client": "sync"}`` and
``{"case": "connections", "what", "opened"}``."""

import asyncio
import json
import statistics
import sys
import threading
import time
from typing import Any, List

import redis
import redis.asyncio

import leasehold
import leasehold.asyncio

RUN_FOR = 3.0
TASKS = 64
MODES = [("synced", leasehold.Sync()), ("not synced", leasehold.SYNC_OFF)]
#: The 64-task modes, taking turns over ROUNDS rounds of ROUND seconds: the package (its sync pool
#: of the default size, and one as large as the tasks), and redis-py alone sending the same
#: commands (``redis.asyncio``'s pool gives each concurrent command a connection of its own).
ROUNDS = 5
ROUND = 1.0
TASK_MODES = {
    "synced": ("package", leasehold.Sync()),
    "synced, 64 sync connections": ("wide", leasehold.Sync()),
    "not synced": ("package", leasehold.SYNC_OFF),
    "plain synced": ("plain", "SYNC"),
    "plain not synced": ("plain", "NOSYNC"),
}


def acquire_release(url: str, mode: str, sync: Any) -> List[float]:
    """One thread's acquire + release for ROUND seconds: the latency of each; ``sync`` a
    :class:`leasehold.Sync`, or ``"SYNC"`` / ``"NOSYNC"`` for redis-py alone sending
    ``LOCK.ACQUIRE`` and ``LOCK.RELEASE``."""
    r = redis.Redis.from_url(url)
    key = f"bench:client-sync:{mode}"
    if mode.endswith("tied"):
        # A pool of one connection, bound to a session (as the package's are), which lives
        # while the connection that opened it (``holder``) stays connected.
        holder = redis.Redis.from_url(url, single_connection_client=True)
        session = holder.execute_command("LOCK.SESSION", "OPEN")[0]
        r = redis.Redis(connection_pool=redis.ConnectionPool.from_url(url, max_connections=1))
        r.execute_command("LOCK.SESSION", "USE", session)
    if isinstance(sync, str):
        def once() -> None:
            assert r.execute_command("LOCK.ACQUIRE", key, "owner", 10000, sync) is not None
            r.execute_command("LOCK.RELEASE", key, "owner")
    else:
        lock = leasehold.Lock(r, key, timeout=10, sync=sync)

        def once() -> None:
            assert lock.acquire(blocking=False)
            lock.release()
    latencies = []
    started = time.perf_counter()
    while time.perf_counter() - started < ROUND:
        sent = time.perf_counter()
        once()
        latencies.append(time.perf_counter() - sent)
    leasehold.close_pools(r)
    return latencies


def one_task(url: str) -> List[dict]:
    """:func:`acquire_release` of each mode in turn, ROUNDS times: the latencies' quantiles."""
    modes = [*MODES, ("plain synced", "SYNC"), ("plain not synced", "NOSYNC"),
             ("plain synced, tied", "SYNC")]
    found: dict = {mode: [] for mode, _ in modes}
    for _ in range(ROUNDS):
        for mode, sync in modes:
            found[mode] += acquire_release(url, mode, sync)
    rows = []
    for mode, latencies in found.items():
        latencies.sort()
        rows.append({
            "case": "acquire+release",
            "mode": mode,
            "ops_per_s": round(len(latencies) / (ROUNDS * ROUND)),
            "p50_ms": round(statistics.median(latencies) * 1000, 3),
            "p99_ms": round(latencies[round((len(latencies) - 1) * 0.99)] * 1000, 3),
        })
    return rows


async def many_tasks(url: str) -> List[dict]:
    """64 asyncio tasks, each on a lock of its own, looping acquire + release, each mode of
    TASK_MODES in turn for ROUND seconds over ROUNDS rounds: their throughput together, and this
    process's and the master's CPU time per iteration (µs)."""
    admin = redis.asyncio.Redis.from_url(url)
    clients = {"package": redis.asyncio.Redis.from_url(url), "wide": redis.asyncio.Redis.from_url(url),
               "plain": redis.asyncio.Redis.from_url(url)}
    leasehold.asyncio.configure_pools(clients["wide"], sync=TASKS)
    totals = {mode: [0, 0.0, 0.0, 0.0] for mode in TASK_MODES}

    async def loop(mode: str, n: int, stop: float, done: List[int]) -> None:
        who, sync = TASK_MODES[mode]
        r = clients[who]
        key = f"bench:tasks:{mode}:{n}"
        if who == "plain":
            while time.perf_counter() < stop:
                assert await r.execute_command("LOCK.ACQUIRE", key, "owner", 10000, sync) is not None
                await r.execute_command("LOCK.RELEASE", key, "owner")
                done[0] += 1
            return
        lock = leasehold.asyncio.Lock(r, key, timeout=10, sync=sync)
        while time.perf_counter() < stop:
            assert await lock.acquire(blocking=False)
            await lock.release()
            done[0] += 1

    for _ in range(ROUNDS):
        for mode in TASK_MODES:
            done = [0]
            cpu, server = time.process_time(), await server_cpu(admin)
            started = time.perf_counter()
            await asyncio.gather(*(loop(mode, n, started + ROUND, done) for n in range(TASKS)))
            total = totals[mode]
            total[0] += done[0]
            total[1] += time.perf_counter() - started
            total[2] += time.process_time() - cpu
            total[3] += await server_cpu(admin) - server
    for r in clients.values():
        await leasehold.asyncio.close_pools(r)
        await r.aclose() if hasattr(r, "aclose") else await r.close()
    await admin.aclose() if hasattr(admin, "aclose") else await admin.close()
    return [{"case": f"{TASKS} tasks", "mode": mode, "ops_per_s": round(done / seconds),
             "client_cpu_us": round(cpu * 1e6 / done, 1), "server_cpu_us": round(server * 1e6 / done, 1),
             "client": "asyncio"}
            for mode, (done, seconds, cpu, server) in totals.items()]


async def server_cpu(admin: Any) -> float:
    """The master's CPU seconds so far (``used_cpu_user`` + ``used_cpu_sys``)."""
    info = await admin.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def many_threads(url: str, mode: str, sync: leasehold.Sync) -> dict:
    r = redis.Redis.from_url(url, max_connections=TASKS * 2)
    done = []
    stop = time.perf_counter() + RUN_FOR

    def loop(n: int) -> None:
        lock = leasehold.Lock(r, f"bench:threads:{mode}:{n}", timeout=10, sync=sync)
        count = 0
        while time.perf_counter() < stop:
            assert lock.acquire(blocking=False)
            lock.release()
            count += 1
        done.append(count)

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(TASKS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    leasehold.close_pools(r)
    return {"case": f"{TASKS} threads", "mode": mode, "ops_per_s": round(sum(done) / elapsed),
            "client": "sync"}


def received(admin: redis.Redis) -> int:
    """Connections the master accepted so far (``admin``'s own already open)."""
    return int(admin.info("stats")["total_connections_received"])


def synced_grants(r: redis.Redis, count: int) -> None:
    lock = leasehold.Lock(r, "bench:connections:grants", timeout=10)
    for _ in range(count):
        assert lock.acquire(blocking=False)
        lock.release()


async def contend(locks: list, count: int, workers: int = 8) -> None:
    """``count`` blocking acquires (``LOCK.ACQUIRE ... WAIT``) by ``workers`` tasks sharing
    ``locks``, each released at once."""

    async def worker(n: int) -> None:
        lock = locks[n % len(locks)]
        for _ in range(count // workers):
            assert await lock.acquire(blocking_timeout=30)
            await asyncio.sleep(0)
            await lock.release()

    await asyncio.gather(*(worker(n) for n in range(workers)))


async def waits(url: str, admin: redis.Redis, count: int) -> int:
    """Connections opened by ``count`` waits after a warm-up."""
    r = redis.asyncio.Redis.from_url(url)
    locks = [leasehold.asyncio.Lock(r, f"bench:connections:wait:{n}", timeout=10) for n in range(2)]
    await contend(locks, 200)  # warm-up: the client's own connections and the wait pool's
    before = received(admin)
    await contend(locks, count)
    opened = received(admin) - before
    await leasehold.asyncio.close_pools(r)
    await r.aclose() if hasattr(r, "aclose") else await r.close()
    return opened


def connections(url: str) -> list:
    admin = redis.Redis.from_url(url)
    admin.ping()
    r = redis.Redis.from_url(url)
    synced_grants(r, 10)  # warm-up: the client's own connection and the sync pool's
    before = received(admin)
    synced_grants(r, 1000)
    grants = received(admin) - before
    leasehold.close_pools(r)
    return [{"case": "connections", "what": "1000 synced grants", "opened": grants},
            {"case": "connections", "what": "1000 waits",
             "opened": asyncio.run(waits(url, admin, 1000))}]


def main(url: str) -> None:
    for row in one_task(url):
        print(json.dumps(row), flush=True)
    for row in asyncio.run(many_tasks(url)):
        print(json.dumps(row), flush=True)
    for mode, sync in MODES:
        print(json.dumps(many_threads(url, mode, sync)), flush=True)
    for row in connections(url):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
