// A real redis-server with the leasehold module for the tests, on a free loopback port in a
// temp dir, killed when the process exits (and a master with two replicas); a TCP proxy whose
// last connection can be stalled, or that can be cut off altogether; and the client libraries
// the tests run with. LEASEHOLD_SERVER names the server (default redis-server), LEASEHOLD_MODULE
// the module (default the repository's debug build), LEASEHOLD_NODE_CLIENTS the library
// versions (`all`, the default: every major the package claims; `current`: the newest of each).

import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, statSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import * as redis6 from 'redis';
import * as redis5 from 'redis5';
import * as redis4 from 'redis4';
import * as ioredis6 from 'ioredis';
import * as ioredis5 from 'ioredis5';

const { Redis } = ioredis6;

export const ROOT = resolve(fileURLToPath(import.meta.url), '../../../..');

export function freePort() {
  return new Promise((done) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

/** A server with the module, given `extra` server arguments and `moduleArgs` for the module
 * (`min-insync-replicas 2`, ...). */
export async function startServer(extra = [], moduleArgs = []) {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-'));
  // A port may be taken between freePort() and the server's bind (test files run in parallel
  // processes, and connections draw from the same ports): the server exits, and a new port is
  // tried.
  for (let attempt = 0; attempt < 5; attempt++) {
    const server = await startOn(await freePort(), dir, extra, moduleArgs);
    if (server) return server;
  }
  throw new Error(`no free port for the server:\n${readFileSync(join(dir, 'server.log'), 'utf8')}`);
}

/** Starts the server on `port`; resolves once its own process answers (another server on the
 * port would answer PING too), or to null if the port was taken. */
async function startOn(port, dir, extra, moduleArgs) {
  const binary = process.env.LEASEHOLD_SERVER ?? 'redis-server';
  const module = process.env.LEASEHOLD_MODULE ?? join(ROOT, 'target', 'debug', 'libleasehold.so');
  const logPath = join(dir, 'server.log');
  const log = openSync(logPath, 'a');
  const loggedBefore = statSync(logPath).size;
  const child = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir,
    '--save', '', '--appendonly', 'no', '--loadmodule', module, ...moduleArgs, ...extra],
  { stdio: ['ignore', log, log] });
  closeSync(log);
  let exited = false;
  child.on('exit', () => { exited = true; });
  process.on('exit', () => child.kill('SIGKILL'));
  const deadline = Date.now() + 20_000;
  for (;;) {
    const admin = new Redis(port, '127.0.0.1', { lazyConnect: true, retryStrategy: () => null });
    admin.on('error', () => {}); // a refused connection before the server listens rejects connect()
    try {
      await admin.connect();
      const pid = /^process_id:(\d+)/m.exec(await admin.call('INFO', 'server'))?.[1];
      if ((await admin.ping()) === 'PONG' && Number(pid) === child.pid) {
        return {
          port,
          url: `redis://127.0.0.1:${port}`,
          admin,
          signal: (name) => child.kill(name),
          stop: () => { admin.disconnect(); child.kill('SIGKILL'); },
        };
      }
      admin.disconnect();
    } catch {
      admin.disconnect();
    }
    if (exited) {
      const logged = readFileSync(logPath, 'utf8').slice(loggedBefore);
      if (logged.includes('Address already in use')) return null;
      throw new Error(`the server exited at start:\n${logged}`);
    }
    if (Date.now() > deadline) throw new Error('the server did not start');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** How a test connects with one release of node-redis: `client(port, extra)` to one server
 * (`extra`: the library's client options), `cluster(port)` to the Redis Cluster a node of which
 * listens on `port`. */
function nodeRedis({ createClient, createCluster }) {
  const url = (port) => `redis://127.0.0.1:${port}`;
  return {
    client: async (port, extra = {}) => { const client = createClient({ url: url(port), ...extra }); await client.connect(); return client; },
    cluster: async (port) => { const cluster = createCluster({ rootNodes: [{ url: url(port) }] }); await cluster.connect(); return cluster; },
  };
}

/** The same with one release of ioredis. */
function ioredis({ Redis: Client, Cluster }) {
  return {
    client: async (port, extra = {}) => new Client(port, '127.0.0.1', extra),
    cluster: async (port) => {
      const cluster = new Cluster([{ host: '127.0.0.1', port }]);
      await until(async () => cluster.status === 'ready');
      return cluster;
    },
  };
}

/** Every major version of each library the package claims (peerDependencies: `redis >= 4`,
 * `ioredis >= 5`), each at the newest release of that major (package.json). */
const LIBRARIES = {
  'node-redis 6': nodeRedis(redis6),
  'node-redis 5': nodeRedis(redis5),
  'node-redis 4': nodeRedis(redis4),
  'ioredis 6': ioredis(ioredis6),
  'ioredis 5': ioredis(ioredis5),
};

/** The newest major of each library: every test runs with these. */
const NEWEST_LABELS = ['node-redis 6', 'ioredis 6'];

/** The versions a test of what differs between versions (connecting, waiting, sessions, a blip,
 * a failover, closing, clusters) runs with: every one the package claims, or with
 * `LEASEHOLD_NODE_CLIENTS=current` the newest only (as `make test` runs them on all but its
 * first server, to stay within its time). */
const LABELS = process.env.LEASEHOLD_NODE_CLIENTS === 'current' ? NEWEST_LABELS : Object.keys(LIBRARIES);

const connectors = (labels, kind) => Object.fromEntries(labels.map((label) => [label, LIBRARIES[label][kind]]));

/** `label → connect(port, extra)` for each of the versions {@link LABELS} names. */
export const CLIENTS = connectors(LABELS, 'client');
/** `label → connect(port)`, a cluster client, for the same versions. */
export const CLUSTERS = connectors(LABELS, 'cluster');
/** `label → connect(port, extra)` for the newest major of each library only: for the tests of
 * what the package does the same whichever library carries it (how a synced write counts). */
export const NEWEST = connectors(NEWEST_LABELS, 'client');

/** The members of the master's in-sync replica set: `lock_insync_replicas` of its `INFO lock`. */
export async function inSyncReplicas(admin) {
  return Number(/^lock_insync_replicas:(\d+)/m.exec(await admin.call('INFO', 'lock'))?.[1] ?? -1);
}

/** Makes each of `replicas` a replica of `master`, and waits until all are in its in-sync set
 * (a replica joins once it is online and caught up): only then do synced grants count. */
export async function attach(master, ...replicas) {
  for (const replica of replicas) await replica.admin.call('REPLICAOF', '127.0.0.1', String(master.port));
  await until(async () => (await inSyncReplicas(master.admin)) === replicas.length, 30_000);
}

/** A master with one replica in its in-sync set, the module given `moduleArgs` on both;
 * `stop()` resumes the replica if a test stopped it, then kills them. */
export async function pair(moduleArgs = []) {
  const master = await startServer(['--repl-diskless-sync-delay', '0'], moduleArgs);
  const replica = await startServer([], moduleArgs);
  await attach(master, replica);
  return { master, replica, stop: () => { replica.signal('SIGCONT'); master.stop(); replica.stop(); } };
}

let named = 0;
/** A key name no other test of this process uses: `what`, the pid and a counter. */
export const unique = (what) => `${what}:${process.pid}:${named++}`;

/** A master with two replicas in its in-sync set, the module given `moduleArgs` on all three;
 * `stop()` kills them. */
export async function group(moduleArgs) {
  const primary = await startServer(['--repl-diskless-sync-delay', '0'], moduleArgs);
  const replicas = [await startServer([], moduleArgs), await startServer([], moduleArgs)];
  await attach(primary, ...replicas);
  return { primary, replicas, stop: () => [primary, ...replicas].forEach((server) => server.stop()) };
}

export async function close(client) {
  if (typeof client.call === 'function') client.disconnect();
  else if (client.destroy) client.destroy();
  else await client.disconnect();
}

export async function until(condition, timeout = 10_000) {
  const deadline = Date.now() + timeout;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** `LOCK.INFO key` as an object of its fields (a shared lock's `owners` as the server sent
 * them), or null when the lock is free. */
export async function lockInfo(admin, key) {
  const info = await admin.call('LOCK.INFO', key);
  if (info === null) return null;
  return Object.fromEntries(info.flatMap((field, at) => (at % 2 === 0 ? [[field, info[at + 1]]] : [])));
}

export async function waiters(admin, key) {
  const info = await lockInfo(admin, key);
  return info === null ? -1 : Number(info.waiters);
}

/** A proxy to `target`; `stallLastConnection()` makes what the server sends the connection
 * opened last get lost on the way, and returns its number; `closedByClient(number)` tells
 * whether the client closed that connection; `cut()` closes every connection through it and
 * refuses new ones, as a network gone for the clients behind it. */
export async function stallingProxy(target) {
  const sockets = [];
  const closedByClient = new Set();
  let stalled = -1;
  const server = net.createServer((client) => {
    const number = sockets.length;
    const upstream = net.connect(target, '127.0.0.1');
    sockets.push(client, upstream);
    client.on('data', (data) => upstream.write(data));
    upstream.on('data', (data) => { if (number !== stalled) client.write(data); });
    for (const socket of [client, upstream]) socket.on('error', () => {});
    client.on('close', () => { closedByClient.add(number); upstream.destroy(); });
    upstream.on('close', () => client.destroy());
    connections.push(number);
  });
  const connections = [];
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    stallLastConnection: () => { stalled = connections[connections.length - 1]; return stalled; },
    closedByClient: (number) => closedByClient.has(number),
    cut: () => { server.close(); sockets.forEach((s) => s.destroy()); },
    close: () => { server.close(); sockets.forEach((s) => s.destroy()); },
  };
}

/** A field of the server's `INFO` (`total_connections_received`, `connected_clients`, ...). */
export async function infoField(admin, name) {
  const info = await admin.call('INFO');
  return Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)[1]);
}

/**
 * A child process that runs `body` — a module with `client` (of `label`'s library, connected to
 * `port`, with a session grace of `grace` ms) and `dist` (the package) in scope, which takes
 * something and ends with the number to report — then prints that number and sleeps: resolves
 * once it printed, with the process and the number (a token, an epoch). `what` names it in the
 * error when it exits first.
 */
export async function childProcess(label, port, grace, body, what) {
  const code = `
    import { CLIENTS } from ${JSON.stringify(new URL('./helpers.mjs', import.meta.url).href)};
    import * as dist from ${JSON.stringify(new URL('../dist/index.js', import.meta.url).href)};
    const client = await CLIENTS[process.env.LABEL](Number(process.env.PORT));
    dist.setSessionOptions(client, { grace: ${grace} });
    const number = await (async () => { ${body} })();
    process.stdout.write(number + '\\n');
    setInterval(() => {}, 60_000);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
    env: { ...process.env, LABEL: label, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout.setEncoding('utf8');
  const line = await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', (code) => reject(new Error(`the ${what} process exited (${code}) first`)));
  });
  return { child, number: Number(line.trim()) };
}
