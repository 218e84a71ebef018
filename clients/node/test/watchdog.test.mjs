// The watchdog when a renewal does not count, with every library version at once: one whose
// reply was lost (its connection stalled) is tried again at once on a new connection; and
// through a replica lost for good, on a real master with two replicas — no renewal counts while
// the master still has the dead replica in its in-sync set, so the watchdog tries again every
// moment rather than a third of the lease later, and one lands once the master dropped it,
// before the lease that last counted ends. Each was lost before the watchdog retried.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { createLock } from '../dist/index.js';
import { CLIENTS, close, group, inSyncReplicas, lockInfo, stallingProxy, startServer } from './helpers.mjs';

/** Resolves `ms` after `from` (ms of `performance.now()`). */
const sleepUntil = (from, ms) => new Promise((r) => setTimeout(r, from + ms - performance.now()));

/** Each of {@link CLIENTS}, by label, connected to the port `portOf(label)` gives. */
async function connectAll(portOf) {
  return Object.fromEntries(await Promise.all(Object.entries(CLIENTS).map(async ([label, connect]) => [label, await connect(portOf(label))])));
}

/** Every holding of `holdings` (by label) not told lost, and still holding its lock (`name(label)`)
 * on `server` with its token; then released. */
async function stillHeld(server, holdings, name) {
  for (const [label, holding] of Object.entries(holdings)) {
    assert.equal(holding.signal.aborted, false, `${label}: told lost: ${holding.signal.reason?.message}`);
    const info = await lockInfo(server.admin, name(label));
    assert.deepEqual([info?.owner, info?.token], [holding.owner, holding.token], `${label}: still held, with its token`);
    assert.equal(await holding.release(), true);
  }
}

describe('the watchdog', { concurrency: true }, () => {
  it('tries a renewal whose reply was lost again at once, on a new connection', async (t) => {
    const server = await startServer();
    const proxies = Object.fromEntries(await Promise.all(Object.keys(CLIENTS).map(async (label) => [label, await stallingProxy(server.port)])));
    const clients = await connectAll((label) => proxies[label].port);
    t.after(async () => {
      await Promise.all(Object.values(clients).map(close));
      Object.values(proxies).forEach((proxy) => proxy.close());
      server.stop();
    });
    // Renewed every 667 ms, and given up on 800 ms later (the sync timeout and the margin): the
    // next try a third of the lease after that would come after the lease had ended.
    const lease = 2_000;
    const name = (label) => `stalled:${label}`;
    const sent = performance.now();
    const holdings = Object.fromEntries(await Promise.all(Object.entries(clients).map(async ([label, client]) => {
      const lock = createLock(client, name(label), { ttl: lease, watchdog: true, sync: { timeout: 300 }, timeoutMargin: 500 });
      return [label, await lock.tryAcquire()];
    })));
    // The last connection each client opened: the one of its sync pool that carried the grant.
    const stalled = Object.fromEntries(Object.entries(proxies).map(([label, proxy]) => [label, proxy.stallLastConnection()]));
    await sleepUntil(sent, 2 * lease);
    for (const [label, proxy] of Object.entries(proxies)) assert.ok(proxy.closedByClient(stalled[label]), `${label}: the stalled connection closed`);
    await stillHeld(server, holdings, name);
  });

  it('keeps a holding through a replica lost for good: renewals that do not count are tried again until one does', async (t) => {
    // A replica killed for good is dropped from the in-sync set 5.6 to 6.4 s after it died here
    // (the module's docs: `insync-timeout-ms` + `insync-drop-delay-ms` + up to 2 s). Killed just
    // before the watchdog's first renewal (4 s after the grant), it is dropped after the renewal
    // a third of the lease after that one (at 8.2 s) would have ended, and early enough for a
    // renewal tried again within a second to land before the lease ends (at 11.9 s).
    const { primary, replicas, stop } = await group(['insync-timeout-ms', '1000', 'insync-drop-delay-ms', '4000']);
    const clients = await connectAll(() => primary.port);
    t.after(async () => { await Promise.all(Object.values(clients).map(close)); stop(); });
    const lease = 12_000;
    const name = (label) => `watched:${label}`;
    const sent = performance.now();
    const holdings = Object.fromEntries(await Promise.all(Object.entries(clients).map(async ([label, client]) => {
      // Each synced renewal waits up to 200 ms for the replicas.
      const lock = createLock(client, name(label), { ttl: lease, watchdog: true, sync: { timeout: 200 } });
      return [label, await lock.tryAcquire()];
    })));
    await sleepUntil(sent, lease / 3 - 300);
    replicas[1].signal('SIGKILL');
    await sleepUntil(sent, lease / 3 + 500);
    assert.equal(await inSyncReplicas(primary.admin), 2, 'the first renewal could not count: the dead replica was still in the set');
    await sleepUntil(sent, 2 * lease);
    assert.equal(await inSyncReplicas(primary.admin), 1, 'the master dropped the dead replica');
    await stillHeld(primary, holdings, name);
  });
});
