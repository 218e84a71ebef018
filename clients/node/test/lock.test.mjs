// The Node package against a real server, with each library version helpers.mjs runs (every
// major of node-redis and ioredis the package claims): every API item, waits on pooled
// connections of their own (the program's connection stays free, and ioredis's commandTimeout
// cannot cut a wait short), keyPrefix, using() with renewal and the AbortSignal, a lost reply
// (its connection closed, not reused), a pooled connection the server dropped closed quietly
// and replaced, the pools closed with the client, and the read-write lock and semaphore.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { createLock, createReadWriteLock, createSemaphore } from '../dist/index.js';
import { CLIENTS, close, infoField, stallingProxy, startServer, unique, until, waiters } from './helpers.mjs';

const server = await startServer();
after(() => server.stop());


for (const [label, connect] of Object.entries(CLIENTS)) {
  describe(label, () => {
    let client;
    before(async () => { client = await connect(server.port); });
    after(() => close(client));

    it('takes, renews and releases a lock with a fencing token', async () => {
      const name = unique('order');
      const lock = createLock(client, name, { ttl: 10_000 });
      const holding = await lock.tryAcquire();
      assert.ok(holding);
      assert.equal(typeof holding.token, 'number');
      assert.ok(Number.isSafeInteger(holding.token));
      assert.equal(await server.admin.call('LOCK.FENCE', name), holding.token);
      assert.equal(await createLock(client, name).tryAcquire(), null);
      assert.equal(await holding.renew(20_000), true);
      assert.ok((await server.admin.pttl(name)) > 19_000);
      assert.equal(await holding.release(), true);
      const next = await createLock(client, name).tryAcquire();
      assert.ok(next.token > holding.token);
      await next.release();
      assert.equal(await holding.release(), false, 'no longer held');
    });

    it('waits in the server on its own connection, past a command timeout', async () => {
      const name = unique('busy');
      const holding = await createLock(client, name, { ttl: 10_000 }).tryAcquire();
      // A client that gives up on any reply after 300 ms (ioredis's commandTimeout).
      const received = await infoField(server.admin, 'total_connections_received');
      const impatient = await connect(server.port, label.startsWith('ioredis') ? { commandTimeout: 300 } : {});
      const waiting = createLock(impatient, name, { ttl: 10_000 }).acquire({ wait: 3_000 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      // The program's own connection is not stalled by the wait.
      const started = Date.now();
      assert.equal(await (impatient.call ? impatient.call('PING') : impatient.sendCommand(['PING'])), 'PONG');
      assert.ok(Date.now() - started < 200);
      await new Promise((r) => setTimeout(r, 800));
      await holding.release();
      const granted = await waiting;
      assert.ok(granted && granted.token > holding.token);
      const opened = (await infoField(server.admin, 'total_connections_received')) - received;
      assert.equal(opened, 3, 'its own, one for the wait and one for the session: the wait was not cut short and asked again');
      await granted.release();
      await close(impatient);
    });

    it('times out with null, and waits without limit when asked', async () => {
      const name = unique('timeout');
      const holding = await createLock(client, name, { ttl: 10_000 }).tryAcquire();
      const started = Date.now();
      assert.equal(await createLock(client, name).acquire({ wait: 200 }), null);
      assert.ok(Date.now() - started >= 190);
      const forever = createLock(client, name).acquire();
      await until(async () => (await waiters(server.admin, name)) === 1);
      await holding.release();
      const granted = await forever;
      assert.ok(granted);
      await granted.release();
    });

    it('using() renews, aborts its signal when the lease is lost, and releases', async () => {
      const name = unique('job');
      const lock = createLock(client, name, { ttl: 300 });
      const result = await lock.using(async (signal, holding) => {
        await new Promise((r) => setTimeout(r, 1_000));
        assert.equal(signal.aborted, false, 'renewed past three leases');
        assert.equal(await server.admin.call('LOCK.FENCE', name), holding.token);
        return 'done';
      });
      assert.equal(result, 'done');
      assert.equal(await server.admin.exists(name), 0, 'released at the end');
      await assert.rejects(lock.using(async (signal) => {
        await server.admin.del(name);
        await new Promise((resolve) => signal.addEventListener('abort', resolve));
        assert.ok(signal.aborted);
        throw new Error('stopped because the lease was lost');
      }), /stopped because/);
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(await server.admin.exists(name), 0, 'never taken back');
    });

    it('one lock object shared by 8 concurrent calls excludes them; re-entry is explicit', async () => {
      const name = unique('invoice');
      const lock = createLock(client, name, { ttl: 10_000 });
      assert.equal(lock.owner, undefined, 'a new owner per acquire');
      let inside = 0;
      const tokens = [];
      await Promise.all(Array.from({ length: 8 }, () => (async () => {
        for (let round = 0; round < 5; round++) {
          await lock.using(async (signal, holding) => {
            assert.equal(inside++, 0, 'two inside at once');
            tokens.push(holding.token);
            await new Promise((resolve) => setTimeout(resolve, 2));
            inside--;
          });
        }
      })()));
      assert.equal(tokens.length, 40);
      assert.ok(tokens.every((token, i) => i === 0 || token > tokens[i - 1]), 'in grant order');

      const outer = await lock.tryAcquire();
      assert.equal(await lock.tryAcquire(), null, 'the same object again is another owner');
      const inner = await outer.reenter();
      assert.equal(inner.token, outer.token);
      assert.equal(inner.owner, outer.owner);
      assert.equal(await inner.release(), true);
      assert.equal(await server.admin.call('LOCK.FENCE', name, outer.owner), outer.token, 'one hold left');
      assert.equal(await outer.release(), true);
      assert.equal(await server.admin.exists(name), 0);
    });

    it('a lost reply is followed up, so the lock is never held unknowingly', async () => {
      const name = unique('lost');
      const holding = await createLock(client, name, { ttl: 10_000 }).tryAcquire();
      const proxy = await stallingProxy(server.port);
      const through = await connect(proxy.port);
      const waiter = createLock(through, name, { ttl: 10_000, timeoutMargin: 300 });
      const waiting = waiter.acquire({ wait: 500 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      const stalled = proxy.stallLastConnection(); // the wait's own connection
      await holding.release();
      const granted = await waiting;
      assert.ok(granted, 'told it holds the lock the server granted');
      assert.equal(await server.admin.call('LOCK.FENCE', name, granted.owner), granted.token);
      await until(async () => proxy.closedByClient(stalled));
      await granted.release();
      const again = await waiter.acquire({ wait: 1_000 });
      assert.ok(again, 'the next wait on a new connection');
      await again.release();
      await close(through);
      proxy.close();
    });

    it('closing the client closes the connections its locks borrowed', async () => {
      const connected = () => infoField(server.admin, 'connected_clients');
      const before = await connected();
      const own = await connect(server.port);
      try {
        const holding = await createLock(own, unique('pooled'), { ttl: 10_000 }).acquire({ wait: 1_000 });
        assert.ok(await holding.renew());
        await holding.release();
        assert.ok((await connected()) >= before + 3, 'its own, a wait connection and a sync connection');
      } finally {
        await close(own);
      }
      await until(async () => (await connected()) === before);
    });

    it('readers share, a writer waits, and a semaphore counts permits', async () => {
      const name = unique('report');
      const first = createReadWriteLock(client, name);
      const second = createReadWriteLock(client, name);
      const r1 = await first.read.tryAcquire();
      const r2 = await second.read.tryAcquire();
      assert.ok(r1 && r2 && r2.token > r1.token);
      assert.equal(await first.write.tryAcquire(), null);
      const writing = createReadWriteLock(client, name).write.acquire({ wait: 5_000 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      await r1.release();
      await r2.release();
      const written = await writing;
      assert.ok(written && written.token > r2.token);
      // The writer downgrades through its holding; another reader joins; the upgrade waits
      // for it to leave.
      assert.equal(await written.downgrade(), true);
      const reader = await first.read.tryAcquire();
      assert.ok(reader, 'readers share');
      assert.equal(await written.upgrade(), false, 'another reads');
      await reader.release();
      const readToken = written.token;
      assert.equal(await written.upgrade(), true, 'the only reader');
      assert.ok(written.token > readToken, 'exclusive writing starts anew');
      assert.equal(await server.admin.call('LOCK.FENCE', name, written.owner), written.token);
      await written.release();

      const pool = createSemaphore(client, unique('pool'), 2);
      const [a, b] = [await pool.tryAcquire(), await pool.tryAcquire()];
      assert.ok(a && b && a.token !== b.token);
      assert.equal(await pool.tryAcquire(), null);
      await a.release();
      assert.ok(await pool.tryAcquire());
    });

    it('replaces pooled connections the server dropped, closing them quietly', async () => {
      // node-redis 5's destroy() throws ClientClosedError on a connection closed already: the
      // pool closes a dead idle one before it lends a new one, and that must not throw.
      const ids = async () => (await server.admin.call('CLIENT', 'LIST')).split('\n').filter(Boolean)
        .map((line) => /\bid=(\d+)/.exec(line)[1]);
      const own = await connect(server.port);
      try {
        const known = new Set(await ids());
        const lock = createLock(own, unique('dropped'), { ttl: 10_000 });
        await (await lock.acquire({ wait: 1_000 })).release(); // a wait connection, and the session's
        const opened = (await ids()).filter((id) => !known.has(id));
        assert.ok(opened.length >= 1);
        for (const id of opened) await server.admin.call('CLIENT', 'KILL', 'ID', id);
        await new Promise((r) => setTimeout(r, 100));
        const holding = await lock.acquire({ wait: 1_000 });
        assert.ok(holding, 'on new connections');
        assert.equal(await holding.release(), true);
      } finally {
        await close(own);
      }
    });
  });
}

describe('ioredis keyPrefix', () => {
  it('is applied to the lock key', async () => {
    const prefixed = await CLIENTS['ioredis 6'](server.port, { keyPrefix: 'app:' });
    const holding = await createLock(prefixed, 'order:9').tryAcquire();
    assert.ok(holding);
    assert.equal(await server.admin.call('LOCK.FENCE', 'app:order:9'), holding.token);
    assert.equal(await server.admin.exists('order:9'), 0);
    await holding.release();
    prefixed.disconnect();
  });
});
