// What syncing grants to the replicas costs the Node package, with node-redis, on a master
// with one replica, grants synced (the default: the grant with SYNC on a pooled connection, its
// reply held by the server until the replica has it) and not (sync: false: NOSYNC). Prints one
// JSON object per line:
//
// - {"case": "acquire+release", "mode", "ops_per_s", "p50_ms", "p99_ms"}: one loop of
//   tryAcquire() → release() for 3 s; the latency of acquire + release.
// - {"case": "64 tasks", "mode", "ops_per_s"}: 64 concurrent promises, each on its own lock,
//   looping tryAcquire() → release() for 3 s.
// - {"case": "connections", "what": "1000 synced grants" | "1000 waits", "opened"}: the master's
//   total_connections_received grown over 1000 synced acquire + release after warm-up, and
//   over 1000 acquires that wait in the server (8 workers contending for 2 locks with
//   acquire({ wait })).
//
// Run by `make bench` with the master's URL as the argument.

import { createClient } from 'redis';

import { createLock } from '../dist/index.js';

const RUN_FOR = 3_000;
const MODES = [['synced', undefined], ['not synced', false]];
const client = await createClient({ url: process.argv[2] }).connect();
// Synced grants count once the replica is in the master's in-sync set, a moment after it is online.
while (!/^lock_insync_replicas:[1-9]/m.test(String(await client.sendCommand(['INFO', 'lock'])))) {
  await new Promise((r) => setTimeout(r, 50));
}

/** `tasks` concurrent promises looping tryAcquire() → release() on `lockOf(task)` for RUN_FOR ms:
 * the latency of each acquire + release, and the seconds it all took. */
async function timed(tasks, lockOf) {
  const latencies = [];
  const started = performance.now();
  await Promise.all(Array.from({ length: tasks }, async (_, task) => {
    const lock = lockOf(task);
    while (performance.now() - started < RUN_FOR) {
      const sent = performance.now();
      const holding = await lock.tryAcquire();
      await holding.release();
      latencies.push(performance.now() - sent);
    }
  }));
  return { latencies, seconds: (performance.now() - started) / 1_000 };
}

for (const [mode, sync] of MODES) {
  const { latencies, seconds } = await timed(1, () => createLock(client, 'bench:client-sync', { ttl: 10_000, sync }));
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.round((latencies.length - 1) * q)];
  console.log(JSON.stringify({
    case: 'acquire+release',
    mode,
    ops_per_s: Math.round(latencies.length / seconds),
    p50_ms: Number(at(0.5).toFixed(3)),
    p99_ms: Number(at(0.99).toFixed(3)),
  }));
}

for (const [mode, sync] of MODES) {
  const { latencies, seconds } = await timed(64, (task) => createLock(client, `bench:client-sync:${task}`, { ttl: 10_000, sync }));
  console.log(JSON.stringify({ case: '64 tasks', mode, ops_per_s: Math.round(latencies.length / seconds) }));
}

/** The master's total_connections_received. */
async function received() {
  const stats = String(await client.sendCommand(['INFO', 'stats']));
  return Number(/total_connections_received:(\d+)/.exec(stats)[1]);
}

/** How many connections the master received while `work` ran, after it ran once to warm up. */
async function opened(work) {
  await work();
  const before = await received();
  await work();
  return (await received()) - before;
}

const grants = createLock(client, 'bench:client-sync:grants', { ttl: 10_000 });
console.log(JSON.stringify({
  case: 'connections',
  what: '1000 synced grants',
  opened: await opened(async () => {
    for (let i = 0; i < 1_000; i++) await (await grants.tryAcquire()).release();
  }),
}));

const contended = [0, 1].map((i) => createLock(client, `bench:client-sync:contended:${i}`, { ttl: 10_000 }));
console.log(JSON.stringify({
  case: 'connections',
  what: '1000 waits',
  opened: await opened(() => Promise.all(Array.from({ length: 8 }, async (_, worker) => {
    for (let i = 0; i < 125; i++) await (await contended[worker % 2].acquire({ wait: 10_000 })).release();
  }))),
}));
await client.close();
