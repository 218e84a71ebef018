// What syncing grants to the replicas costs the Node package: one loop of tryAcquire() →
// release() on a master with one replica for 3 s, with node-redis, with grants synced (the
// default: WAIT 1 on the grant's own connection) and not (sync: false).
//
// Run by `make bench` with the master's URL as the argument; prints one JSON object per mode:
// {"mode", "ops_per_s", "p50_ms", "p99_ms"}, the latency of acquire + release.

import { createClient } from 'redis';

import { createLock } from '../dist/index.js';

const RUN_FOR = 3_000;
const client = await createClient({ url: process.argv[2] }).connect();
for (const [mode, sync] of [['synced', undefined], ['not synced', false]]) {
  const lock = createLock(client, 'bench:client-sync', { ttl: 10_000, sync });
  const latencies = [];
  const started = performance.now();
  while (performance.now() - started < RUN_FOR) {
    const sent = performance.now();
    const holding = await lock.tryAcquire();
    await holding.release();
    latencies.push(performance.now() - sent);
  }
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.round((latencies.length - 1) * q)];
  console.log(JSON.stringify({
    mode,
    ops_per_s: Math.round(latencies.length / ((performance.now() - started) / 1_000)),
    p50_ms: Number(at(0.5).toFixed(3)),
    p99_ms: Number(at(0.99).toFixed(3)),
  }));
}
await client.close();
