/**
 * Writes synced to replicas before they count: a grant or a renewal is followed, on the
 * connection that carried it, by `WAIT replicas timeout` (or `WAITAOF 1 replicas timeout`),
 * and counts only once enough replicas have it. Replication is asynchronous: without this, a
 * master can acknowledge a grant (or a renewal) and fail before any replica has it, and the
 * promoted replica grants the same lock again (or ends the lease earlier than the holder
 * believes).
 *
 * How many replicas to wait for, by default, is learned from the master in the write's own
 * round trip (`INFO replication`, pipelined with it: its replicas online) and never lowered by
 * a drop the same master sees: in a split brain an old master loses exactly the replica that was
 * promoted, and would otherwise count a grant as synced to the one replica about to be
 * re-pointed elsewhere. A master is known by its replication ID, which a promotion changes, so
 * a new master is learned anew.
 */

/** How grants and renewals reach the replicas before they count. */
export interface SyncOptions {
  /**
   * Replicas to wait for; omitted: every replica the master has online (learned). 0: off.
   *
   * Fewer than the master has is not safe: a failover may promote a replica that did not
   * acknowledge, which then grants the lock again. A ten-minute `make chaos` run (888e1d5) found
   * 16 double grants among grants synced to one of two replicas, all after `SENTINEL
   * FAILOVER` (later runs: docs/guarantees.md).
   */
  replicas?: number;
  /** How long to wait for them, ms (default 1 000: a replica that is up acknowledges within a
   * round trip plus its lag; a second runs out only when one is down or far behind). It also
   * bounds the wait for a connection of the sync pool. */
  timeout?: number;
  /** `WAITAOF 1 n` instead of `WAIT n`: on disk on the master and the replicas (Redis 7.2+,
   * Valkey 8+, with `appendonly yes`). */
  aof?: boolean;
}

/** A grant or renewal was made on the master but fewer replicas than wanted had it in time
 * (or no connection came free for it within the sync timeout: `acked` 0, nothing sent). It
 * does not count: an acquire's grant, or a re-entry's new hold, is released (owner-checked); a
 * downgrade or upgrade stays made on the master while the holding keeps its mode, token and
 * lease; a renewal leaves the holding's lease the last synced one. Not "busy": the lock was
 * free, the replicas were not there. */
export class NotReplicatedError extends Error {
  override name = 'NotReplicatedError';

  /** `acked`: replicas that had it in time; `wanted`: replicas waited for; `write`: what was
   * not synced (`'grant'` for an acquire, a re-entry, a downgrade and an upgrade). */
  constructor(
    readonly acked: number,
    readonly wanted: number,
    readonly write: 'grant' | 'renewal' = 'grant',
  ) {
    super(`the ${write} reached ${acked} of the ${wanted} replicas wanted in time: it does not count`);
  }
}

export const DEFAULT_SYNC_TIMEOUT = 1_000;

/** `INFO replication`: how many replicas the master has, read in the write's round trip. */
export const INFO_REPLICATION = ['INFO', 'replication'];

/** `WAIT n timeout` or `WAITAOF 1 n timeout`, `timeoutMs` at least 1 (0 would be no limit). */
export function waitCommand(sync: SyncOptions, replicas: number, timeoutMs: number): string[] {
  const timeout = String(Math.max(Math.ceil(timeoutMs), 1));
  return sync.aof ? ['WAITAOF', '1', String(replicas), timeout] : ['WAIT', String(replicas), timeout];
}

/** How many replicas a `WAIT` / `WAITAOF` reply says have the writes. */
export function ackedBy(sync: SyncOptions, reply: unknown): number {
  if (sync.aof) {
    const [local, replicas] = reply as [number, number];
    return Number(local) >= 1 ? Number(replicas) : 0;
  }
  return Number(reply);
}

/** What the masters of one place (a server, or a cluster master) said of their replicas: the
 * most any reported online, never lowered — an old master still taking writes after a
 * failover may keep a replica Sentinel has not moved yet, and a master back without its data
 * has none at first. After a failover, writes on the new master are not synced until it has as
 * many replicas as before (until the old master rejoins as a replica); a replica removed for
 * good keeps counting: set `replicas`, or make a new client. */
export class Learned {
  /** The most replicas any master here had. */
  private most = 0;
  /** Replication IDs of masters that were replaced: a promoted replica reports its old
   * master's as `master_replid2`. */
  private readonly replaced = new Set<string>();

  /** The count so far (0 before a master was first heard). */
  get count(): number {
    return this.most;
  }

  /** Takes note of `INFO replication` and returns the count to wait for; `undefined` for a
   * master this client saw replaced — an old master still taking writes after a failover (a
   * split brain), whose replica count says nothing: none of its writes count. */
  heard(info: string): number | undefined {
    const field = (name: string) => info.split(/\r?\n/).find((line) => line.startsWith(`${name}:`))?.slice(name.length + 1).trim();
    const replicationId = field('master_replid');
    const previous = field('master_replid2');
    if (previous !== undefined && /[^0]/.test(previous)) this.replaced.add(previous);
    if (replicationId !== undefined && this.replaced.has(replicationId)) return undefined;
    const online = field('role') === 'master'
      ? info.split(/\r?\n/).filter((line) => line.startsWith('slave') && line.includes('state=online')).length
      : 0;
    this.most = Math.max(this.most, online);
    return this.most;
  }
}
