// createMultiLock against a real master and replica, with each library version helpers.mjs
// runs: several locks taken together with one token per key, released and renewed together, one
// lock object shared by concurrent calls (and crossed key orders) excluding them without
// deadlock, using() losing the set when part of it goes, and the grant on the replica before
// it is returned.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { createLock, createMultiLock } from '../dist/index.js';
import { CLIENTS, close, pair, until } from './helpers.mjs';

const { master, replica, stop } = await pair();
after(stop);

let counter = 0;
const unique = (what) => {
  const tag = `${what}:${process.pid}:${counter++}`;
  return [`{${tag}}:a`, `{${tag}}:b`];
};

for (const [label, connect] of Object.entries(CLIENTS)) {
  describe(label, () => {
    let client;
    before(async () => { client = await connect(master.port); });
    after(() => close(client));

    it('takes a set whole with a token per key, on the replica, and releases it whole', async () => {
      const names = unique('set');
      const set = createMultiLock(client, names, { ttl: 10_000 });
      assert.deepEqual(set.names, names);
      const holding = await set.tryAcquire();
      assert.ok(holding);
      assert.equal(holding.tokens.length, 2);
      assert.ok(holding.tokens.every((token) => token === holding.token));
      for (const name of names) {
        assert.equal(await replica.admin.call('LOCK.FENCE', name), holding.token, 'on the replica');
      }
      assert.equal(await createLock(client, names[1]).tryAcquire(), null);
      assert.equal(await set.tryAcquire(), null, 'a new owner: busy');
      await assert.rejects(holding.reenter(), /not supported on a set/);
      assert.equal(await holding.renew(20_000), true);
      assert.ok((await master.admin.pttl(names[0])) > 19_000);
      assert.equal(await holding.release(), true);
      assert.equal(await master.admin.exists(...names), 0);
    });

    it('shared by concurrent calls in crossed key orders, sets take turns', async () => {
      const names = unique('crossed');
      const forward = createMultiLock(client, names, { ttl: 10_000 });
      const backward = createMultiLock(client, [...names].reverse(), { ttl: 10_000 });
      let inside = 0;
      const loop = async (lock) => {
        for (let round = 0; round < 5; round++) {
          await lock.using(async () => {
            inside += 1;
            assert.equal(inside, 1, 'two inside at once');
            await new Promise((r) => setTimeout(r, 1));
            inside -= 1;
          }, { wait: 10_000 });
        }
      };
      await Promise.all([forward, backward, forward, backward].map(loop));
      assert.equal(await master.admin.exists(...names), 0);
    });

    it('using() aborts its signal when part of the set is lost', async () => {
      const names = unique('lost');
      const set = createMultiLock(client, names, { ttl: 300 });
      const aborted = await set.using(async (signal) => {
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(signal.aborted, false, 'renewed past its lease');
        await master.admin.del(names[0]);
        await until(async () => signal.aborted, 2_000);
        return signal.aborted;
      });
      assert.equal(aborted, true);
      await until(async () => (await master.admin.exists(names[1])) === 0);
    });
  });
}
