// Elections against a real server, with each library version helpers.mjs runs: a campaign, the
// leader, renewal, proclaim and resign; a second candidate waiting in line and leading at once
// after a resignation, with a larger epoch; a stale term's proclaim and resign refused, nothing
// changed; a fixed candidate campaigning again keeps its term; a term without a session or
// without sync; an observer told nobody → a leader → its new value → nobody → the next leader,
// in order; a leader process killed with kill -9 (its term tied to a session, grace 500 ms)
// replaced by the waiting candidate within the grace + 100 ms with a larger epoch, an observer
// told of the vacancy first; a leader cut off for longer than the grace told it lost its term
// before the next candidate leads; a blip — every connection of the leader, a waiting candidate
// and an observer killed once — within the server's 3 s grace: the term is kept, not told lost,
// the candidate waits on, and the observer sees no change; and ioredis's keyPrefix.

import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';

import { Election, NotReplicatedError, createElection, setSessionOptions } from '../dist/index.js';
import { CLIENTS, NEWEST, childProcess, close, freePort, lockInfo, stallingProxy, startServer, unique, until, waiters } from './helpers.mjs';

const GRACE = 500;
/** How long after a blip the leader must keep its term: the server's default grace. */
const BLIP_WATCH = 3_000;
const NOBODY = { leader: null, epoch: 0, value: '', ttl: -2 };

const server = await startServer();
after(() => server.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Whether `promise` is still pending. */
async function pending(promise) {
  const marker = Symbol('pending');
  return (await Promise.race([promise, Promise.resolve(marker)])) === marker;
}

/** `election.observe()` collected into `states` (each state's leader, epoch and value) until
 * `stop()`, which resolves once the iteration ended. */
function observer(election) {
  const controller = new AbortController();
  const states = [];
  const done = (async () => {
    for await (const state of election.observe({ signal: controller.signal })) {
      assert.deepEqual(Object.keys(state).sort(), ['epoch', 'leader', 'ttl', 'value']);
      states.push({ leader: state.leader, epoch: state.epoch, value: state.value });
    }
  })();
  return { states, stop: () => { controller.abort(); return done; } };
}

/** A state as the observer keeps it. */
const seen = (leadership) => ({ leader: leadership.candidate, epoch: leadership.epoch, value: leadership.value });
const nobody = { leader: null, epoch: 0, value: '' };

/** A child process that leads `name` with a 30 s lease through `label`'s client and a 500 ms
 * session grace, and sleeps; resolves once it leads, with the process and its epoch. */
async function leaderProcess(label, name) {
  const { child, number } = await childProcess(label, server.port, GRACE, `return (await new dist.Election(client, ${JSON.stringify(name)}, { ttl: 30_000, candidate: 'killed' }).campaign('child', { wait: 0 })).epoch;`, 'leader');
  return { child, epoch: number };
}

for (const [label, connect] of Object.entries(CLIENTS)) {
  describe(label, () => {
    let client;
    const opened = [];
    before(async () => { client = await connect(server.port); });
    after(() => close(client));
    afterEach(async () => { await Promise.all(opened.splice(0).map(close)); });

    it('campaigns, leads with an epoch, renews, proclaims and resigns', async () => {
      const name = unique('cron');
      const election = createElection(client, name, { ttl: 900 });
      assert.ok(election instanceof Election);
      assert.deepEqual(await election.leader(), NOBODY);
      const leadership = await election.campaign('10.0.0.1:8080');
      assert.ok(leadership);
      assert.ok(Number.isSafeInteger(leadership.epoch) && leadership.epoch > 0);
      assert.match(leadership.candidate, /^[0-9a-f-]{36}$/, 'a new random candidate');
      assert.equal(leadership.value, '10.0.0.1:8080');
      const info = await lockInfo(server.admin, name);
      assert.deepEqual([info.owner, info.token], [leadership.candidate, leadership.epoch]);
      assert.ok(info.session, 'tied to the client\'s session');
      const state = await election.leader();
      assert.deepEqual({ ...state, ttl: 0 }, { leader: leadership.candidate, epoch: leadership.epoch, value: '10.0.0.1:8080', ttl: 0 });
      assert.ok(state.ttl > 0 && state.ttl <= 900);
      // Another candidate does not lead while it does.
      assert.equal(await createElection(client, name).campaign('other', { wait: 0 }), null);
      assert.equal(await createElection(client, name).campaign('other', { wait: 200 }), null);
      // Renewed like a held lock, past two leases.
      await sleep(2_000);
      assert.equal(leadership.signal.aborted, false, `told lost: ${leadership.signal.reason?.message}`);
      assert.equal((await election.leader()).epoch, leadership.epoch);
      assert.equal(await leadership.proclaim('10.0.0.1:9090'), true);
      assert.equal(leadership.value, '10.0.0.1:9090');
      assert.deepEqual({ ...(await election.leader()), ttl: 0 }, { leader: leadership.candidate, epoch: leadership.epoch, value: '10.0.0.1:9090', ttl: 0 });
      assert.equal(await leadership.resign(), true);
      assert.deepEqual(await election.leader(), NOBODY);
      assert.equal(await leadership.resign(), false, 'resigned already');
      assert.equal(await leadership.proclaim('late'), false);
      assert.equal(leadership.signal.aborted, false, 'never aborted by resign()');
      assert.equal(await server.admin.exists(name), 0);
    });

    it('a second candidate waits in line and leads at once after a resignation, with a larger epoch', async () => {
      const name = unique('line');
      const first = await createElection(client, name, { ttl: 10_000, candidate: 'host-a' }).campaign('a');
      const other = await connect(server.port);
      opened.push(other);
      const waiting = createElection(other, name, { ttl: 10_000, candidate: 'host-b' }).campaign('b');
      await until(async () => (await waiters(server.admin, name)) === 1);
      assert.ok(await pending(waiting));
      const resigned = performance.now();
      assert.equal(await first.resign(), true);
      const second = await waiting;
      const took = performance.now() - resigned;
      assert.ok(took < 200, `led ${took.toFixed(0)} ms after the resignation`);
      assert.ok(second.epoch > first.epoch, 'a larger epoch');
      assert.equal(second.candidate, 'host-b');
      assert.deepEqual({ ...(await createElection(client, name).leader()), ttl: 0 }, { leader: 'host-b', epoch: second.epoch, value: 'b', ttl: 0 });
      assert.equal(await second.resign(), true);
    });

    it('a stale term: its proclaim and resign are refused, and change nothing', async () => {
      const name = unique('stale');
      const election = createElection(client, name, { ttl: 10_000 });
      const old = await election.campaign('old');
      // Its term ended behind its back (as when it paused past its lease), and another leads.
      assert.equal(await server.admin.call('LOCK.RESIGN', name, String(old.epoch)), 1);
      const next = await election.campaign('next', { wait: 0 });
      assert.ok(next && next.epoch > old.epoch);
      const before = await election.leader();
      assert.equal(await old.proclaim('overwrite'), false);
      assert.ok(old.signal.aborted, 'a refused proclaim: lost');
      assert.match(old.signal.reason.message, /no longer leads/);
      assert.equal(old.value, 'old');
      assert.equal(await old.resign(), false);
      const after = await election.leader();
      assert.deepEqual({ ...after, ttl: 0 }, { ...before, ttl: 0 }, 'nothing changed');
      assert.equal(after.value, 'next');
      assert.equal(next.signal.aborted, false);
      assert.equal(await server.admin.call('LOCK.PROCLAIM', name, String(old.epoch), 'x'), 0);
      assert.equal(await next.proclaim('still'), true);
      assert.equal(await next.resign(), true);
    });

    it('a fixed candidate that campaigns again while it leads keeps its term, with the new value', async () => {
      const name = unique('again');
      const election = createElection(client, name, { ttl: 10_000, candidate: 'host-a' });
      assert.equal(election.candidate, 'host-a');
      const first = await election.campaign('v1');
      const again = await election.campaign('v2', { wait: 0 });
      assert.equal(again.epoch, first.epoch);
      assert.equal((await election.leader()).value, 'v2');
      assert.equal(await again.resign(), true);
      assert.equal(await first.resign(), false, 'the same term, ended');
    });

    it('without a session, or without sync: the term is tied to no session, and proclaims', async () => {
      // The first binds a connection of the sync pool to the client's session (a tied write goes
      // there even unsynced); a campaign with session: false on it unbinds it first
      // (LOCK.SESSION USE NONE), or the binding would tie it.
      for (const options of [{ sync: false }, { session: false }, { session: false, sync: false }]) {
        const name = unique('untied');
        const leadership = await createElection(client, name, { ttl: 10_000, ...options }).campaign('v', { wait: 0 });
        assert.ok(leadership, JSON.stringify(options));
        const tied = Boolean((await lockInfo(server.admin, name)).session);
        assert.equal(tied, options.session !== false, `${JSON.stringify(options)}: tied to a session`);
        assert.equal(await leadership.proclaim('w'), true);
        assert.equal((await createElection(client, name).leader()).value, 'w');
        assert.equal(await leadership.resign(), true);
      }
    });

    it('observes nobody, a leader, its new value, nobody, and the next leader, in order', async () => {
      const name = unique('observed');
      const election = createElection(client, name, { ttl: 10_000 });
      const watch = observer(election);
      try {
        await until(() => watch.states.length === 1);
        const first = await election.campaign('a');
        await until(() => watch.states.length === 2);
        assert.equal(await first.proclaim('a2'), true);
        await until(() => watch.states.length === 3);
        const waiting = election.campaign('b');
        await until(async () => (await waiters(server.admin, name)) === 1);
        assert.equal(await first.resign(), true);
        const second = await waiting;
        await until(() => watch.states.length === 5);
        await sleep(100);
        assert.deepEqual(watch.states, [
          nobody,
          { leader: first.candidate, epoch: first.epoch, value: 'a' },
          { leader: first.candidate, epoch: first.epoch, value: 'a2' },
          nobody,
          seen(second),
        ]);
        await second.resign();
        await until(() => watch.states.length === 6);
        assert.deepEqual(watch.states[5], nobody);
      } finally {
        await watch.stop();
      }
    });

    it('a leader killed with kill -9: the waiting candidate leads within the grace, and an observer sees the vacancy first', async (t) => {
      const name = unique('killed');
      const { child, epoch } = await leaderProcess(label, name);
      t.after(() => child.kill('SIGKILL'));
      const election = createElection(client, name, { ttl: 10_000, candidate: 'waiting' });
      const watch = observer(election);
      try {
        await until(() => watch.states.length === 1);
        assert.deepEqual(watch.states[0], { leader: 'killed', epoch, value: 'child' });
        const waiting = election.campaign('next', { wait: 10_000 });
        await until(async () => (await waiters(server.admin, name)) === 1);
        const killed = performance.now();
        child.kill('SIGKILL');
        const next = await waiting;
        const took = performance.now() - killed;
        assert.ok(next, 'leads');
        assert.ok(took <= GRACE + 100, `led ${took.toFixed(0)} ms after the kill, not within the grace (${GRACE} ms) + 100 ms`);
        assert.ok(next.epoch > epoch, 'a larger epoch');
        t.diagnostic(`led ${took.toFixed(0)} ms after the kill`);
        await until(() => watch.states.length === 3);
        assert.deepEqual(watch.states, [{ leader: 'killed', epoch, value: 'child' }, nobody, seen(next)]);
        assert.equal(await next.resign(), true);
      } finally {
        await watch.stop();
      }
    });

    it('a leader cut off for longer than the grace learns it lost its term before the next candidate leads', async () => {
      const name = unique('cut');
      const proxy = await stallingProxy(server.port);
      const cutOff = await connect(proxy.port);
      cutOff.on('error', () => {}); // behind a proxy that is cut: reconnect attempts fail
      setSessionOptions(cutOff, { grace: GRACE });
      opened.push(cutOff);
      const leadership = await createElection(cutOff, name, { ttl: 30_000 }).campaign('cut');
      let lostAt;
      leadership.signal.addEventListener('abort', () => { lostAt = performance.now(); });
      const waiting = createElection(client, name, { ttl: 10_000 }).campaign('next', { wait: 10_000 });
      await until(async () => (await waiters(server.admin, name)) === 1);
      const cutAt = performance.now();
      proxy.cut();
      const next = await waiting;
      const ledAt = performance.now();
      assert.ok(next && next.epoch > leadership.epoch, 'the next candidate leads, with a larger epoch');
      assert.ok(lostAt !== undefined && lostAt < ledAt, `lost at ${(lostAt - cutAt).toFixed(0)} ms, the next led at ${(ledAt - cutAt).toFixed(0)} ms`);
      assert.ok(lostAt - cutAt <= GRACE, 'within a grace of the cut');
      assert.equal(await leadership.proclaim('late'), false, 'lost: not even asked');
      await next.resign();
      proxy.close();
    });
  });
}

describe('a blip: every connection of the clients killed once', { concurrency: true }, () => {
  for (const [label, connect] of Object.entries(CLIENTS)) {
    it(`${label}: the leader keeps its term, is not told it lost it, the candidate waits on, and the observer sees no change`, async (t) => {
      // A server of its own: CLIENT KILL TYPE normal would cut the other tests' clients too.
      const own = await startServer();
      t.after(() => own.stop());
      const [leaderClient, waiterClient] = [await connect(own.port), await connect(own.port)];
      t.after(() => Promise.all([leaderClient, waiterClient].map(close)));
      for (const client of [leaderClient, waiterClient]) client.on('error', () => {}); // the killed connections
      const name = unique('blip');
      // The package's defaults: a 30 s lease, the server's 3 s grace.
      const leadership = await createElection(leaderClient, name).campaign('leader');
      const election = createElection(waiterClient, name);
      const watch = observer(election);
      try {
        await until(() => watch.states.length === 1);
        const waiting = election.campaign('waiter');
        await until(async () => (await waiters(own.admin, name)) === 1);
        // Every normal connection but the admin's own: the clients', their pools' and sessions'.
        assert.ok((await own.admin.call('CLIENT', 'KILL', 'TYPE', 'normal')) >= 5);
        const killed = performance.now();
        while (performance.now() - killed < BLIP_WATCH) {
          assert.equal(leadership.signal.aborted, false, `the leader was told it lost its term ${(performance.now() - killed).toFixed(0)} ms after the blip: ${leadership.signal.reason?.message}`);
          assert.ok(await pending(waiting), 'the candidate still waits');
          await sleep(50);
        }
        assert.deepEqual(watch.states, [seen(leadership)], 'the observer saw no change');
        assert.deepEqual({ ...(await election.leader()), ttl: 0 }, { ...seen(leadership), ttl: 0 }, 'still the leader, with its epoch');
        assert.equal(await leadership.proclaim('still'), true);
        await until(() => watch.states.length === 2);
        assert.equal(await leadership.resign(), true);
        const next = await waiting;
        assert.ok(next && next.epoch > leadership.epoch, 'led once resigned, with a larger epoch');
        await until(() => watch.states.length === 4);
        assert.deepEqual(watch.states.slice(1), [{ ...seen(leadership), value: 'still' }, nobody, seen(next)]);
        await next.resign();
      } finally {
        await watch.stop();
      }
    });
  }
});

describe('a proclaim the replicas did not have', () => {
  for (const [label, connect] of Object.entries(NEWEST)) {
    it(`${label}: rejects with NotReplicatedError, the leadership kept with its value`, async (t) => {
      // A server of its own that was a replica for a moment: it then requires an in-sync
      // replica for synced writes, and has none, so it refuses the proclaim's SYNC at once.
      const alone = await startServer();
      t.after(() => alone.stop());
      const client = await connect(alone.port);
      t.after(() => close(client));
      const name = unique('unsynced');
      const leadership = await createElection(client, name, { ttl: 10_000, session: false }).campaign('before');
      await alone.admin.call('REPLICAOF', '127.0.0.1', String(await freePort()));
      await alone.admin.call('CONFIG', 'SET', 'lock.allow-unsafe-promotion', 'yes');
      await alone.admin.call('REPLICAOF', 'NO', 'ONE');
      await assert.rejects(leadership.proclaim('after'), (error) => {
        assert.ok(error instanceof NotReplicatedError, String(error));
        assert.equal(error.write, 'renewal');
        return true;
      });
      assert.equal(leadership.value, 'before');
      assert.equal((await createElection(client, name).leader()).value, 'after', 'set on the master (which a failover may lose)');
      assert.equal(leadership.signal.aborted, false);
      assert.equal((await alone.admin.call('LOCK.FENCE', name)), leadership.epoch, 'still leads');
      assert.equal(await leadership.resign(), true);
    });
  }
});

describe('ioredis keyPrefix', () => {
  it('is applied to the election\'s key', async () => {
    const prefixed = await CLIENTS['ioredis 6'](server.port, { keyPrefix: 'app:' });
    try {
      const name = unique('prefixed');
      const election = createElection(prefixed, name, { ttl: 10_000 });
      const leadership = await election.campaign('v');
      assert.equal((await lockInfo(server.admin, `app:${name}`)).token, leadership.epoch);
      assert.equal((await election.leader()).epoch, leadership.epoch);
      const watch = observer(election);
      await until(() => watch.states.length === 1);
      assert.equal(await leadership.proclaim('w'), true);
      await until(() => watch.states.length === 2);
      assert.equal(watch.states[1].value, 'w');
      await watch.stop();
      assert.equal(await leadership.resign(), true);
      assert.equal(await server.admin.exists(`app:${name}`), 0);
    } finally {
      await close(prefixed);
    }
  });
});
