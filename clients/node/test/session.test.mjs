// Sessions against a real server, with each library version helpers.mjs runs, a grace of
// 500 ms: a holder process killed with kill -9 hands its lock to a waiter within the grace; a
// killed session connection is reconnected within it and nothing is handed over; a holder cut
// off for longer learns it lost the lock before the waiter is granted; one session per client,
// closed with it; pooled connections bound to the session once (LOCK.SESSION USE) and their
// acquires and renewals carrying no SESSION, bound again to a new session after the old one
// was closed, and unbound for an untied lock; a session the server forgot (as after a
// failover) replaced, the holding renewed onto the new one over a connection bound to it; a
// session ended by someone else losing its holding; and sessions off (for the client, or one
// lock) leaving holdings to their leases. And a blip, with the package's defaults: every
// connection of a holder and a waiter killed once, the holder keeps its lock through the
// server's 3 s grace, and the waiter waits on.

import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';

import { createLock, createMultiLock, setSessionOptions } from '../dist/index.js';
import { CLIENTS, NEWEST, childProcess, close, freePort, lockInfo, stallingProxy, startServer, unique, until, waiters } from './helpers.mjs';

const GRACE = 500;
/** How long after a blip the holder must keep its lock: the server's default grace. */
const BLIP_WATCH = 3_000;

const server = await startServer();
after(() => server.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The ids of the connections named `leasehold-session` (the clients' session connections). */
async function sessionConnections() {
  const list = await server.admin.call('CLIENT', 'LIST');
  return list.split('\n').filter((line) => / name=leasehold-session /.test(line)).map((line) => /^id=(\d+)/.exec(line)[1]);
}

/** The commands the server runs from now on (`MONITOR`), each as `{ args, source }` (the
 * client's `ip:port`); `stop()` ends it. On a node-redis connection: ioredis's `monitor()` fails
 * now and then ("Command queue state error") when a command is monitored right behind the `OK`
 * to `MONITOR`, as the module's own `INFO` every 200 ms can be. */
async function monitored() {
  const seen = [];
  const monitor = await NEWEST['node-redis 6'](server.port);
  await monitor.monitor((line) => seen.push(monitorLine(line)));
  return { seen, stop: () => monitor.destroy() };
}

/** A `MONITOR` line — `1700000000.000001 [0 127.0.0.1:5000] "LOCK.RENEW" "key" ...` — as
 * `{ args, source }` (the module's own commands have no source on Redis 8 and Valkey 8). */
function monitorLine(line) {
  const [, source, quoted] = /^\S+ \[\d+ ?([^\]]*)\] (.*)$/s.exec(line);
  const args = [...quoted.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map(([, arg]) => arg.replace(/\\(.)/g, '$1'));
  return { args, source };
}

/** Of `seen` (a {@link monitored} log): the acquires and renewals of `keys`, and the
 * `LOCK.SESSION USE` sent on the connections that sent them, in order. */
function bindingsAndWrites(seen, keys) {
  const write = ({ args }) => /^LOCK\.M?(ACQUIRE|RENEW)$/i.test(args[0]) && keys.some((key) => args.includes(key));
  const sources = new Set(seen.filter(write).map(({ source }) => source));
  const use = ({ args }) => /^LOCK\.SESSION$/i.test(args[0]) && /^USE$/i.test(args[1]);
  return seen.filter((command) => sources.has(command.source) && (write(command) || use(command)));
}

/** Whether a monitored command ends in `SESSION id`. */
const namesSession = ({ args }) => /^SESSION$/i.test(args[args.length - 2] ?? '');

/** Whether `promise` is still pending. */
async function pending(promise) {
  const marker = Symbol('pending');
  return (await Promise.race([promise, Promise.resolve(marker)])) === marker;
}

/** A child process that takes `name` with a 30 s lease through `label`'s client and a 500 ms
 * session grace, and sleeps; resolves once it holds it, with the process and its token. */
async function holderProcess(label, name) {
  const { child, number } = await childProcess(label, server.port, GRACE, `return (await dist.createLock(client, ${JSON.stringify(name)}, { ttl: 30_000 }).tryAcquire()).token;`, 'holder');
  return { child, token: number };
}

for (const [label, connect] of Object.entries(CLIENTS)) {
  describe(label, () => {
    let waiter;
    const opened = [];
    /** A client of `label` with a 500 ms session grace, closed after the test. */
    const holderClient = async (port = server.port) => {
      const client = await connect(port);
      client.on('error', () => {}); // behind a proxy that is cut: reconnect attempts fail
      setSessionOptions(client, { grace: GRACE });
      opened.push(client);
      return client;
    };
    before(async () => { waiter = await connect(server.port); });
    after(() => close(waiter));
    afterEach(async () => { await Promise.all(opened.splice(0).map(close)); });

    it('a holder killed with kill -9 hands its lock to a waiter within the grace', async (t) => {
      const name = unique('killed');
      const { child, token } = await holderProcess(label, name);
      t.after(() => child.kill('SIGKILL'));
      const waiting = createLock(waiter, name, { ttl: 10_000 }).acquire({ wait: 10_000 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      const killed = performance.now();
      child.kill('SIGKILL');
      const granted = await waiting;
      const took = performance.now() - killed;
      assert.ok(granted, 'granted');
      assert.ok(took <= GRACE + 100, `granted ${took.toFixed(0)} ms after the kill, not within the grace (${GRACE} ms) + 100 ms`);
      assert.ok(granted.token > token, 'a larger fencing token');
      await granted.release();
    });

    it('a killed session connection is reconnected within the grace: nothing is handed over', async () => {
      const name = unique('blip');
      const client = await holderClient();
      const before = new Set(await sessionConnections());
      const holding = await createLock(client, name, { ttl: 30_000 }).tryAcquire();
      const [link] = (await sessionConnections()).filter((id) => !before.has(id));
      assert.ok(link, 'a connection named leasehold-session');
      const waiting = createLock(waiter, name, { ttl: 10_000 }).acquire({ wait: 10_000 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      assert.equal(await server.admin.call('CLIENT', 'KILL', 'ID', link), 1);
      await sleep(GRACE + 300);
      assert.ok(await pending(waiting), 'the waiter still waits');
      const info = await lockInfo(server.admin, name);
      assert.equal(info.owner, holding.owner, 'still held by the holder');
      assert.ok(info.session, 'tied to its session');
      assert.equal(holding.signal.aborted, false, 'the holder did not lose it');
      assert.ok(!(await sessionConnections()).includes(link), 'on a new connection');
      assert.equal(await holding.renew(), true);
      await holding.release();
      assert.ok(await waiting);
      await (await waiting).release();
    });

    it('a holder cut off for longer than the grace learns it lost the lock before the waiter is granted', async () => {
      const name = unique('cut');
      const proxy = await stallingProxy(server.port);
      const client = await holderClient(proxy.port);
      const holding = await createLock(client, name, { ttl: 30_000 }).tryAcquire();
      let lostAt;
      holding.signal.addEventListener('abort', () => { lostAt = performance.now(); });
      const waiting = createLock(waiter, name, { ttl: 10_000 }).acquire({ wait: 10_000 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      const cutAt = performance.now();
      proxy.cut();
      const granted = await waiting;
      const grantedAt = performance.now();
      assert.ok(granted && granted.token > holding.token, 'handed over with a larger token');
      assert.ok(lostAt !== undefined, 'the holder was told before the grant');
      assert.ok(lostAt < grantedAt, `lost at ${(lostAt - cutAt).toFixed(0)} ms, granted at ${(grantedAt - cutAt).toFixed(0)} ms`);
      assert.ok(lostAt - cutAt <= GRACE, 'within a grace of the cut');
      assert.ok(grantedAt - cutAt < GRACE + 300, `granted ${(grantedAt - cutAt).toFixed(0)} ms after the cut`);
      assert.match(holding.signal.reason.message, /grace/);
      assert.equal(await holding.renew(), false, 'never taken back');
      await granted.release();
      proxy.close();
    });

    it('one session per client: every lock tied to it, and closed with the client', async () => {
      const names = [unique('shared'), unique('shared')];
      const client = await connect(server.port);
      const before = new Set(await sessionConnections());
      const holdings = await Promise.all([
        ...names.map((name) => createLock(client, name, { ttl: 30_000 }).tryAcquire()),
        createMultiLock(client, [`{${names[0]}}:a`, `{${names[0]}}:b`], { ttl: 30_000 }).tryAcquire(),
      ]);
      assert.ok(holdings.every(Boolean));
      assert.equal((await sessionConnections()).filter((id) => !before.has(id)).length, 1, 'one session connection');
      const ids = new Set();
      for (const key of [...names, `{${names[0]}}:a`, `{${names[0]}}:b`]) ids.add((await lockInfo(server.admin, key)).session);
      assert.equal(ids.size, 1, 'one session');
      assert.match([...ids][0], /^[0-9a-f]{16}$/);
      await close(client);
      await until(async () => (await server.admin.exists(...names)) === 0, 2_000);
      assert.ok(holdings.every((holding) => holding.signal.aborted), 'released with the session: lost');
      await until(async () => (await sessionConnections()).every((id) => before.has(id)), 2_000);
    });

    it('pooled connections are bound to the session once, bound again to a new one, and unbound for an untied lock', async () => {
      // A long grace: its heartbeat (every 10 s) does not notice the session closed below before
      // the writes do.
      const client = await connect(server.port);
      opened.push(client);
      setSessionOptions(client, { grace: 30_000 });
      const monitor = await monitored();
      try {
        const keys = Array.from({ length: 8 }, () => unique('bound'));
        const [a, b, c, e1, e2, d, f, g] = keys;
        const lock = (name, options = {}) => createLock(client, name, { ttl: 30_000, ...options });
        const isUse = ({ args }) => /^USE$/i.test(args[1]);

        // A synced grant, another and a renewal on the same sync connection; a wait on a wait
        // connection: each connection bound once, its first write naming the session as well.
        const first = await lock(a).tryAcquire();
        const session = (await lockInfo(server.admin, a)).session;
        assert.match(session, /^[0-9a-f]{16}$/);
        const second = await lock(b).tryAcquire();
        assert.equal(await second.renew(), true);
        const third = await lock(c).acquire({ wait: 1_000 });
        assert.ok(first && second && third);
        for (const key of [a, b, c]) assert.equal((await lockInfo(server.admin, key)).session, session, `${key} tied to the session`);
        await until(() => bindingsAndWrites(monitor.seen, keys).length === 6);
        const before = bindingsAndWrites(monitor.seen, keys);
        const uses = before.filter(isUse);
        assert.deepEqual(uses.map(({ args }) => args[2]), [session, session], 'USE once per connection');
        assert.notEqual(uses[0].source, uses[1].source);
        const written = before.filter((command) => !isUse(command));
        assert.deepEqual(written.map(namesSession), [true, false, false, true], 'SESSION id only behind a USE');
        assert.deepEqual(written.map(({ source }) => source), [uses[0], uses[0], uses[0], uses[1]].map(({ source }) => source));

        // Closed by someone else (its holdings released): two waits at once — one on the wait
        // connection bound to it, refused; one on a new connection, whose USE is refused and whose
        // acquire, naming the session too, is refused with it — and a grant on the bound sync
        // connection: a new session is opened, and each connection bound to it.
        assert.equal(await server.admin.call('LOCK.SESSION', 'CLOSE', session), 3);
        const seenBefore = monitor.seen.length;
        const [fourth, fifth] = await Promise.all([lock(e1).acquire({ wait: 1_000 }), lock(e2).acquire({ wait: 1_000 })]);
        const sixth = await lock(d).tryAcquire();
        assert.ok(fourth && fifth && sixth);
        const next = (await lockInfo(server.admin, d)).session;
        assert.ok(next && next !== session, 'a new session');
        for (const key of [e1, e2, d]) assert.equal((await lockInfo(server.admin, key)).session, next, `${key} tied to the new session`);
        assert.equal(await sixth.renew(), true);
        assert.equal((await lockInfo(server.admin, d)).session, next);
        assert.equal(await first.renew(), false, 'released with the closed session');
        assert.ok(first.signal.aborted);

        // An untied lock on the bound sync connection: unbound first; the next tied write binds
        // it again.
        const untied = await lock(f, { session: false }).tryAcquire();
        assert.equal((await lockInfo(server.admin, f)).session, null, 'not tied');
        const again = await lock(g).tryAcquire();
        assert.equal((await lockInfo(server.admin, g)).session, next);

        await until(() => bindingsAndWrites(monitor.seen, [g]).length > 0);
        const later = bindingsAndWrites(monitor.seen, keys).slice(before.length);
        assert.ok(monitor.seen.indexOf(later[0]) >= seenBefore);
        // The last USE each connection sent, and the binding each has (a USE of the closed
        // session is refused: it leaves the binding as it was).
        const asked = new Map();
        const bound = new Map(uses.map(({ args, source }) => [source, args[2]]));
        for (const command of later) {
          const { args, source } = command;
          if (isUse(command)) {
            assert.notEqual(args[2], bound.get(source), 'never bound again to the session it is bound to');
            asked.set(source, args[2]);
            if (args[2] !== session) bound.set(source, args[2]);
          } else if (namesSession(command)) {
            assert.equal(args.at(-1), asked.get(source), `${args.join(' ')}: SESSION id behind USE id`);
          } else if (args.includes(f)) {
            assert.equal(bound.get(source), 'NONE', 'the untied acquire behind USE NONE');
          } else {
            assert.ok([session, next].includes(bound.get(source)), `${args.join(' ')}: on a bound connection`);
          }
        }
        const usedClosed = later.filter((command) => isUse(command) && command.args[2] === session);
        assert.equal(usedClosed.length, 1, 'the new wait connection was bound to the closed session first (refused)');
        assert.ok(later.some((command) => command.source === usedClosed[0].source && !isUse(command) && command.args.at(-1) === session),
          'its acquire named the closed session');
        await Promise.all([fourth, fifth, sixth, untied, again].map((holding) => holding.release()));
      } finally {
        monitor.stop();
      }
    });

    it('a session the server forgot (as after a failover) is replaced, and the holding renewed onto the new one', async () => {
      // A server of its own: once it was a replica, even for a moment, it requires an in-sync
      // replica for synced writes (so this lock is not synced).
      const alone = await startServer();
      try {
        const name = unique('forgot');
        const client = await holderClient(alone.port);
        const holding = await createLock(client, name, { ttl: 30_000, sync: false }).tryAcquire();
        const first = (await lockInfo(alone.admin, name)).session;
        // Demoted (to a master that is not there: the data stays) and promoted by hand (the
        // module refuses to promote a replica outside an in-sync set unless told to): it
        // forgets its sessions, and keeps the lock with its lease.
        await alone.admin.call('REPLICAOF', '127.0.0.1', String(await freePort()));
        await alone.admin.call('CONFIG', 'SET', 'lock.allow-unsafe-promotion', 'yes');
        await alone.admin.call('REPLICAOF', 'NO', 'ONE');
        await until(async () => {
          const session = (await lockInfo(alone.admin, name))?.session;
          return session && session !== first;
        }, 3_000);
        assert.equal(holding.signal.aborted, false, 'still held');
        assert.equal(await alone.admin.call('LOCK.FENCE', name, holding.owner), holding.token);
        // Renewed to the lease it had left (30 s less 1% and 2 ms from the grant), not longer.
        assert.ok((await alone.admin.pttl(name)) < 29_700);
        // Its connection bound to the new session: a renewal keeps it tied there.
        const next = (await lockInfo(alone.admin, name)).session;
        assert.equal(await holding.renew(20_000), true);
        assert.equal((await lockInfo(alone.admin, name)).session, next);
        await holding.release();
      } finally {
        alone.stop();
      }
    });

    it('a session ended by someone else: its holding is lost at the next heartbeat, and a new session serves', async () => {
      const name = unique('ended');
      const client = await holderClient();
      const lock = createLock(client, name, { ttl: 30_000 });
      const holding = await lock.tryAcquire();
      const session = (await lockInfo(server.admin, name)).session;
      assert.equal(await server.admin.call('LOCK.SESSION', 'CLOSE', session), 1, 'released');
      await until(() => holding.signal.aborted, GRACE);
      const again = await lock.tryAcquire();
      assert.ok(again && again.token > holding.token);
      const next = (await lockInfo(server.admin, name)).session;
      assert.ok(next && next !== session, 'a new session');
      await again.release();
    });

    it('with sessions off — for the client, or for one lock — holdings end with their leases only', async () => {
      const client = await connect(server.port);
      opened.push(client);
      const off = unique('off');
      const kept = await createLock(client, off, { ttl: 30_000, session: false }).tryAcquire();
      assert.equal((await lockInfo(server.admin, off)).session, null, 'this lock: no session');
      await kept.release();
      setSessionOptions(client, { enabled: false });
      const before = new Set(await sessionConnections());
      const name = unique('lease');
      const holding = await createLock(client, name, { ttl: 300 }).tryAcquire();
      assert.equal((await lockInfo(server.admin, name)).session, null);
      assert.deepEqual((await sessionConnections()).filter((id) => !before.has(id)), [], 'no session connection');
      const next = await createLock(waiter, name, { ttl: 10_000 }).acquire({ wait: 2_000 });
      assert.ok(next && next.token > holding.token, 'granted once the lease ended');
      await next.release();
    });
  });
}

describe('a blip: every connection of the clients killed once', { concurrency: true }, () => {
  for (const [label, connect] of Object.entries(CLIENTS)) {
    it(`${label}: the holder keeps its lock, is not told it lost it, and the waiter waits on`, async (t) => {
      // A server of its own: CLIENT KILL TYPE normal would cut the other tests' clients too.
      const own = await startServer();
      t.after(() => own.stop());
      const [holderClient, waiterClient] = [await connect(own.port), await connect(own.port)];
      t.after(() => Promise.all([holderClient, waiterClient].map(close)));
      for (const client of [holderClient, waiterClient]) client.on('error', () => {}); // the killed connections
      const name = unique('blip');
      // The package's defaults: a 30 s lease, the server's 3 s grace.
      const holding = await createLock(holderClient, name, { watchdog: true }).tryAcquire();
      const waiting = createLock(waiterClient, name).acquire({ wait: 30_000 });
      await until(async () => (await waiters(own.admin, name)) === 1);
      // Every normal connection but the admin's own: the clients', their pools' and sessions'.
      assert.ok((await own.admin.call('CLIENT', 'KILL', 'TYPE', 'normal')) >= 4);
      const killed = performance.now();
      while (performance.now() - killed < BLIP_WATCH) {
        assert.equal(holding.signal.aborted, false, `the holder was told it lost the lock ${(performance.now() - killed).toFixed(0)} ms after the blip: ${holding.signal.reason?.message}`);
        assert.ok(await pending(waiting), 'the waiter still waits');
        await sleep(50);
      }
      const info = await lockInfo(own.admin, name);
      assert.deepEqual([info.owner, info.token], [holding.owner, holding.token], 'still held by the holder, with its token');
      assert.equal(await holding.renew(), true);
      await holding.release();
      const granted = await waiting;
      assert.ok(granted && granted.token > holding.token, 'granted once released');
      await granted.release();
    });
  }
});
