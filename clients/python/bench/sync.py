"""What syncing grants to the replicas costs ``leasehold.Lock``: one thread loops
``acquire(blocking=False)`` → ``release()`` on a master with one replica for 3 s, with grants
synced (the default: ``WAIT 1`` on the grant's own connection) and not (``SYNC_OFF``).

Run by ``make bench`` with the master's URL as the argument; prints one JSON object per mode:
``{"mode", "ops_per_s", "p50_ms", "p99_ms"}``, the latency of acquire + release."""

import json
import statistics
import sys
import time

import redis

import leasehold

RUN_FOR = 3.0

r = redis.Redis.from_url(sys.argv[1])
for mode, sync in [("synced", leasehold.Sync()), ("not synced", leasehold.SYNC_OFF)]:
    lock = leasehold.Lock(r, "bench:client-sync", timeout=10, sync=sync)
    latencies = []
    started = time.perf_counter()
    while time.perf_counter() - started < RUN_FOR:
        sent = time.perf_counter()
        assert lock.acquire(blocking=False)
        lock.release()
        latencies.append(time.perf_counter() - sent)
    latencies.sort()
    print(json.dumps({
        "mode": mode,
        "ops_per_s": round(len(latencies) / (time.perf_counter() - started)),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[round((len(latencies) - 1) * 0.99)] * 1000, 3),
    }))
