// Compiled with `tsc --strict --noEmit` by `npm run build`: the API takes both libraries'
// clients and cluster clients, and gives typed results without casts.
import { createClient, createCluster } from 'redis';
import { createClient as createClient4, createCluster as createCluster4 } from 'redis4';
import { createClient as createClient5, createCluster as createCluster5 } from 'redis5';
import { Cluster, Redis } from 'ioredis';
import { Cluster as Cluster5, Redis as Redis5 } from 'ioredis5';

import {
  Election, NotHeldError, NotReplicatedError, StaleTokenError, createElection, fenced, createLock, createMultiLock, createReadWriteLock, createSemaphore, setPoolSizes,
  setSessionOptions, type ElectionOptions, type Holding, type LeaderState, type Leadership, type PoolSizes, type SessionOptions,
} from '../dist/index.js';

export async function typed(): Promise<number> {
  const nodeRedis = await createClient().connect();
  const ioredis = new Redis({ keyPrefix: 'app:' });
  const sizes: PoolSizes = { wait: 64 };
  setPoolSizes(nodeRedis, sizes);
  setPoolSizes(ioredis, { sync: 8 });
  const session: SessionOptions = { grace: 1_000 };
  setSessionOptions(nodeRedis, session);
  setSessionOptions(ioredis, { enabled: false });
  createLock(nodeRedis, 'order:5', { session: false });
  const lock = createLock(nodeRedis, 'order:1', { ttl: 10_000, sync: { replicas: 1, timeout: 500, aof: false } });
  createLock(ioredis, 'order:2', { sync: false });
  const holding: Holding | null = await lock.acquire({ wait: 1_000 });
  const { read, write } = createReadWriteLock(ioredis, 'report');
  const permit = await createSemaphore(ioredis, 'pool', 3).tryAcquire();
  const token: number = await read.using(async (signal, held) => {
    signal.throwIfAborted();
    const owner: string = held.owner;
    const inner: Holding | null = await held.reenter(1_000);
    const upgraded: boolean = await held.upgrade();
    return held.token + (inner?.token ?? 0) + Number(upgraded) + owner.length;
  });
  const fixed: string | undefined = lock.owner;
  await write.tryAcquire();
  await createLock(await createClient4().connect(), 'old').tryAcquire();
  await createLock(await createClient5().connect(), 'old').tryAcquire();
  await createLock(new Redis5(), 'old').tryAcquire();
  for (const cluster of [createCluster({ rootNodes: [] }), createCluster5({ rootNodes: [] }), createCluster4({ rootNodes: [] }), new Cluster([]), new Cluster5([])]) {
    setPoolSizes(cluster, { wait: 8, sync: 4 });
    setSessionOptions(cluster, { grace: 2_000 });
    await createLock(cluster, 'order:4').tryAcquire();
  }
  const electionOptions: ElectionOptions = { ttl: 15_000, candidate: 'host-a', session: true, sync: { timeout: 1_000 } };
  const election: Election = createElection(nodeRedis, 'cron:leader', electionOptions);
  const leadership: Leadership | null = await new Election(ioredis, 'cron:leader').campaign('10.0.0.1:8080', { wait: 5_000 });
  if (leadership) {
    const epoch: number = leadership.epoch;
    const value: string = leadership.value;
    const proclaimed: boolean = await leadership.proclaim(`${value}:${epoch}`);
    leadership.signal.throwIfAborted();
    const resigned: boolean = await leadership.resign();
    void (proclaimed && resigned && leadership.candidate.length);
  }
  const now: LeaderState = await election.leader();
  const leader: string | null = now.leader;
  for await (const state of election.observe({ signal: AbortSignal.timeout(1_000) })) {
    const seen: [string | null, number, string, number] = [state.leader, state.epoch, state.value, state.ttl];
    void seen;
  }
  const fixedCandidate: string | undefined = election.candidate;
  void (leader ?? fixedCandidate);
  const set = await createMultiLock(nodeRedis, ['{order:3}:a', '{order:3}:b']).tryAcquire();
  const tokens: readonly number[] = set?.tokens ?? [];
  const refused = new NotReplicatedError(0, 1);
  const unsynced: 'grant' | 'renewal' | 'command' = refused.write;
  if (holding) {
    const guarded: unknown = await holding.guard('DECRBY', 'stock:3', 1);
    const written: unknown = await holding.fenced('fence:stock:3', 'SET', 'stock:3', '7');
    void [guarded, written];
  }
  const viaFence: unknown = await fenced(nodeRedis, 'fence:stock:3', 9, 'INCR', 'stock:3');
  const notHeld: Error = new NotHeldError('NOTHELD the lock is free; the command did not run');
  const stale = new StaleTokenError('STALE token 1 is below 2, the largest token');
  const staleTokens: [number, number] = [stale.token, stale.largest];
  void [viaFence, notHeld, staleTokens];
  const reason: string = refused.reason;
  return reason.length + unsynced.length + refused.acked + tokens.length + token + (holding?.token ?? 0) + (permit?.token ?? 0) + (fixed?.length ?? 0);
}
