// A holding's guarded command (`holding.guard`, `LOCK.GUARD` with the holding's owner and fencing
// token) and fenced commands (`holding.fenced`, `fenced`, `LOCK.FENCED`) on a real server, with
// each library version helpers.mjs runs: the holder's command runs; a holding whose lease ended,
// once another owner took the lock — or the same owner again, with a new token — is refused with
// NotHeldError and changes nothing; a smaller token is refused with StaleTokenError after a
// larger one wrote; syncing off; a master whose in-sync set is too small (NotReplicatedError, the
// command having run); ioredis's keyPrefix.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { NotHeldError, NotReplicatedError, StaleTokenError, createLock, createMultiLock, fenced } from '../dist/index.js';
import { CLIENTS, attach, close, startServer, unique } from './helpers.mjs';

const server = await startServer();
after(() => server.stop());

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

for (const [label, connect] of Object.entries(CLIENTS)) {
  describe(label, () => {
    let client;
    before(async () => { client = await connect(server.port); });
    after(() => close(client));

    it("runs the holder's command, and refuses a lost holding's with nothing changed", async () => {
      const name = unique('order');
      const stock = `${name}:stock`;
      await server.admin.set(stock, '10');
      const old = await createLock(client, name, { ttl: 200 }).tryAcquire();
      assert.equal(await old.guard('DECRBY', stock, 1), 9);
      assert.equal(String(await old.guard('GET', stock)), '9', "the command's own reply, a read too");
      await pause(300);
      const current = await createLock(client, name, { ttl: 10_000 }).tryAcquire();
      assert.ok(current, 'the lease ended');
      await assert.rejects(old.guard('DECRBY', stock, 1), (error) => {
        assert.ok(error instanceof NotHeldError, String(error));
        assert.match(error.message, /^NOTHELD the lock is held by another owner/);
        return true;
      });
      assert.equal(await server.admin.get(stock), '9', "the stale holder's command did not run");
      assert.equal(await current.guard('DECRBY', stock, 2), 7);
      assert.equal(await current.release(), true);
      await assert.rejects(old.guard('DECRBY', stock, 1), (error) => error instanceof NotHeldError && /the lock is free/.test(error.message));
      assert.equal(await server.admin.get(stock), '7');
    });

    it('refuses a holding lost and taken again by the same owner', async () => {
      const name = unique('order');
      const stock = `${name}:stock`;
      await server.admin.set(stock, '10');
      const old = await createLock(client, name, { ttl: 200, owner: 'host-a' }).tryAcquire();
      await pause(300);
      const again = await createLock(client, name, { ttl: 10_000, owner: 'host-a' }).tryAcquire();
      assert.ok(again.token > old.token);
      await assert.rejects(old.guard('DECRBY', stock, 1), (error) => error instanceof NotHeldError && error.message.includes(`with token ${again.token}, not ${old.token}`));
      assert.equal(await server.admin.get(stock), '10');
      assert.equal(await again.guard('DECRBY', stock, 1), 9);
      await again.release();
    });

    it('refuses a smaller token after a larger one wrote through the fence', async () => {
      const name = unique('order');
      const stock = `${name}:stock`;
      const fence = `${name}:fence`;
      await server.admin.set(stock, '10');
      const first = await createLock(client, name, { ttl: 200 }).tryAcquire();
      await pause(300);
      const second = await createLock(client, name, { ttl: 10_000 }).tryAcquire();
      assert.equal(await second.fenced(fence, 'DECRBY', stock, 1), 9);
      await assert.rejects(first.fenced(fence, 'DECRBY', stock, 1), (error) => {
        assert.ok(error instanceof StaleTokenError, String(error));
        assert.deepEqual([error.token, error.largest], [first.token, second.token]);
        return true;
      });
      assert.equal(await server.admin.get(stock), '9', 'the stale write did not run');
      // A token from anywhere (another server's lock, Redlock): the same fence.
      assert.equal(await fenced(client, fence, second.token + 5, 'SET', stock, '100'), 'OK');
      await assert.rejects(fenced(client, fence, second.token, 'SET', stock, '0'), StaleTokenError);
      assert.equal(await server.admin.get(stock), '100');
      await second.release();
    });

    it('guards with syncing off, and refuses what it cannot guard', async () => {
      const name = unique('order');
      const stock = `${name}:stock`;
      await server.admin.set(stock, '3');
      const holding = await createLock(client, name, { ttl: 10_000, sync: false }).tryAcquire();
      assert.equal(await holding.guard('INCR', stock), 4);
      assert.equal(await holding.fenced(`${name}:fence`, 'INCR', stock), 5);
      await assert.rejects(holding.guard('BLPOP', 'list', 0), /cannot be guarded/);
      await assert.rejects(holding.guard(), /needs a command/);
      await holding.release();
      const set = await createMultiLock(client, [`{${name}}:a`, `{${name}}:b`], { ttl: 10_000 }).tryAcquire();
      await assert.rejects(set.guard('INCR', stock), /not supported on a set/);
      await set.release();
      await assert.rejects(holding.guard('INCR', stock), NotHeldError);
      assert.equal(await server.admin.get(stock), '5');
    });
  });
}

describe('a master whose in-sync set is too small', () => {
  let primary;
  let replica;
  before(async () => {
    primary = await startServer(['--repl-diskless-sync-delay', '0'], ['min-insync-replicas', '2']);
    replica = await startServer([], ['min-insync-replicas', '2']);
    await attach(primary, replica);
  });
  after(() => {
    primary.stop();
    replica.stop();
  });

  it('rejects a guarded and a fenced write with NotReplicatedError, the command having run', async () => {
    const client = await CLIENTS['ioredis 6'](primary.port);
    try {
      const name = unique('order');
      const stock = `${name}:stock`;
      await primary.admin.set(stock, '10');
      // A grant not synced counts at once; the fence's command is synced (the default).
      const holding = await createLock(client, name, { ttl: 10_000, sync: false }).tryAcquire();
      assert.ok(holding);
      await assert.rejects(fenced(client, `${name}:fence`, holding.token, 'DECRBY', stock, 1), (error) => {
        assert.ok(error instanceof NotReplicatedError, String(error));
        assert.equal(error.write, 'command');
        assert.match(error.reason, /fewer than lock.min-insync-replicas/);
        assert.match(error.message, /^the command ran on the master/);
        return true;
      });
      assert.equal(await primary.admin.get(stock), '9', 'it ran on the master: a failover may lose it');
      await holding.release();
    } finally {
      await close(client);
    }
  });
});

describe('ioredis keyPrefix', () => {
  it("prefixes the lock's and the fence's keys, and sends the command's as given", async () => {
    const prefixed = await CLIENTS['ioredis 6'](server.port, { keyPrefix: 'app:' });
    try {
      const name = unique('order');
      await server.admin.set(`app:${name}:stock`, '10');
      const holding = await createLock(prefixed, name, { ttl: 10_000 }).tryAcquire();
      assert.equal(await holding.guard('DECRBY', `app:${name}:stock`, 1), 9);
      assert.equal(await holding.fenced(`${name}:fence`, 'DECRBY', `app:${name}:stock`, 1), 8);
      assert.equal(await server.admin.call('TYPE', `app:${name}:fence`), 'lockfence');
      await holding.release();
    } finally {
      await close(prefixed);
    }
  });
});
