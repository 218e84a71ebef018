// What syncing grants to the replicas costs the Node package, with node-redis, on a master
// with one replica, grants synced (the default: the grants of all tasks queued at once with
// NOSYNC in one pipeline on a pooled connection, LOCK.SYNC behind them, its reply held by the
// server until the replica has them) and not (sync: false: NOSYNC, alone), beside
// node-redis alone sending the same commands (plain: LOCK.ACQUIRE ... SYNC | NOSYNC, then
// LOCK.RELEASE, a connection per task; one task also on a connection bound to a session, as the
// package's are: "plain synced, tied"), the modes taking turns over ROUNDS rounds. Prints one
// JSON object per line:
//
// - {"case": "acquire+release", "mode", "ops_per_s", "p50_ms", "p99_ms"}: one loop of
//   tryAcquire() → release(); the latency of acquire + release.
// - {"case": "64 tasks", "mode", "ops_per_s", "client_cpu_us", "server_cpu_us"}: 64 concurrent
//   promises, each on its own lock, looping tryAcquire() → release(), with this process's and
//   the master's CPU time per iteration. "synced, 64 sync connections": the package with a sync
//   pool as large as the tasks.
// - {"case": "connections", "what": "1000 synced grants" | "1000 waits", "opened"}: the master's
//   total_connections_received grown over 1000 synced acquire + release after warm-up, and
//   over 1000 acquires that wait in the server (8 workers contending for 2 locks with
//   acquire({ wait })).
//
// Run by `make bench` with the master's URL as the argument.

import { createClient } from 'redis';

import { createLock, setPoolSizes } from '../dist/index.js';

const RUN_FOR = 1_000;
const ROUNDS = 5;
const TASKS = 64;
// Who sends the commands (the package; the package with a sync pool of TASKS connections; plain
// node-redis), and whether synced.
const MODES = {
  synced: ['package', true],
  'synced, 64 sync connections': ['wide', true],
  'not synced': ['package', false],
  'plain synced': ['plain', true],
  'plain not synced': ['plain', false],
  'plain synced, tied': ['tied', true],
};
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

// The plain client: node-redis alone sending the same commands, a connection of its own per
// task (a synced reply blocks its connection), beside the package in the same run.
const plain = await Promise.all(Array.from({ length: TASKS }, () => client.duplicate().connect()));
// node-redis alone on a connection bound to a session (LOCK.SESSION USE), as the package's are;
// the session lives while `holder`, which opened it, stays connected.
const holder = await client.duplicate().connect();
const session = await holder.sendCommand(['LOCK.SESSION', 'OPEN']);
const tied = await client.duplicate().connect();
await tied.sendCommand(['LOCK.SESSION', 'USE', String(session[0])]);
// The package with a sync pool as large as the tasks: what the pool's size costs.
const wide = await createClient({ url: process.argv[2] }).connect();
setPoolSizes(wide, { sync: TASKS });

/** A lock-like loop body for each mode: the package's tryAcquire() → release(), or the plain
 * client's LOCK.ACQUIRE → LOCK.RELEASE on connection `task`. */
function lockOf(mode, key, task) {
  const [who, sync] = MODES[mode];
  if (who === 'plain' || who === 'tied') {
    const own = who === 'tied' ? tied : plain[task];
    return {
      async tryAcquire() {
        await own.sendCommand(['LOCK.ACQUIRE', key, 'owner', '10000', sync ? 'SYNC' : 'NOSYNC']);
        return { release: () => own.sendCommand(['LOCK.RELEASE', key, 'owner']) };
      },
    };
  }
  return createLock(who === 'wide' ? wide : client, key, { ttl: 10_000, sync: sync ? undefined : false });
}

/** The master's CPU seconds so far (used_cpu_user + used_cpu_sys). */
async function serverCpu() {
  const info = String(await client.sendCommand(['INFO', 'cpu']));
  return ['user', 'sys'].reduce((sum, what) => sum + Number(new RegExp(`used_cpu_${what}:([\\d.]+)`).exec(info)[1]), 0);
}

const one = {};
for (let round = 0; round < ROUNDS; round++) {
  for (const mode of ['synced', 'not synced', 'plain synced', 'plain not synced', 'plain synced, tied']) {
    const { latencies } = await timed(1, () => lockOf(mode, 'bench:client-sync', 0));
    (one[mode] ??= []).push(...latencies);
  }
}
for (const [mode, latencies] of Object.entries(one)) {
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.round((latencies.length - 1) * q)];
  console.log(JSON.stringify({
    case: 'acquire+release',
    mode,
    ops_per_s: Math.round(latencies.length / (ROUNDS * RUN_FOR / 1_000)),
    p50_ms: Number(at(0.5).toFixed(3)),
    p99_ms: Number(at(0.99).toFixed(3)),
  }));
}

const many = {};
for (let round = 0; round < ROUNDS; round++) {
  for (const mode of Object.keys(MODES).filter((mode) => MODES[mode][0] !== 'tied')) {
    const [cpu, server] = [process.cpuUsage(), await serverCpu()];
    const { latencies, seconds } = await timed(TASKS, (task) => lockOf(mode, `bench:client-sync:${task}`, task));
    const used = process.cpuUsage(cpu);
    const total = (many[mode] ??= { done: 0, seconds: 0, client: 0, server: 0 });
    total.done += latencies.length;
    total.seconds += seconds;
    total.client += (used.user + used.system) / 1e6;
    total.server += (await serverCpu()) - server;
  }
}
for (const [mode, { done, seconds, client: cpu, server }] of Object.entries(many)) {
  console.log(JSON.stringify({
    case: '64 tasks',
    mode,
    ops_per_s: Math.round(done / seconds),
    client_cpu_us: Number((cpu * 1e6 / done).toFixed(1)),
    server_cpu_us: Number((server * 1e6 / done).toFixed(1)),
  }));
}
await Promise.all([...plain, tied, holder].map((own) => own.close()));
await wide.close();

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
