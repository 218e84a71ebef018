/**
 * Writes synced to replicas before they count. Replication is asynchronous: without this, a
 * master can acknowledge a grant (or a renewal) and fail before any replica has it, and the
 * promoted replica grants the same lock again (or ends the lease earlier than the holder
 * believes).
 *
 * The server does it (lock module 0.7.0 and later): a write sent with `SYNC` replies only once
 * every member of the master's **in-sync replica set** (the replicas that have every write it
 * counted; a replica outside it makes itself unpromotable) acknowledged it and the set has the
 * members `lock.min-insync-replicas` requires. Otherwise, within `lock.sync-timeout-ms`, it
 * answers `NOREPLICAS <what was missing>; <what that means>`: a grant was released by the
 * server, a renewal does not count (the lease before it does) — {@link refusalOf}. `NOSYNC`
 * replies at once; `LOCK.SYNC` waits as `SYNC` does for every write before it, and the package
 * sends its acquires and renewals so, several tasks' in one batch on one connection (batch.ts),
 * its refusal meaning the same for each of them ({@link unsyncedBy}) — but the client gives
 * back the grants. A fixed replica count, and the master's AOF, are the client's to wait for:
 * `WAIT` / `WAITAOF` behind the write on its connection ({@link waitCommand}, {@link shortfall}).
 */

/** How grants and renewals reach the replicas before they count. */
export interface SyncOptions {
  /**
   * A fixed number of replicas to wait for (`NOSYNC` on the write, then `WAIT n`) instead of
   * the master's in-sync replica set; 0: off.
   *
   * Fewer than the master has is not safe: a failover may promote a replica that did not
   * acknowledge, which then grants the lock again. A ten-minute `make chaos` run (888e1d5) found
   * 16 double grants among grants synced to one of two replicas, all after `SENTINEL
   * FAILOVER` (later runs: docs/guarantees.md).
   */
  replicas?: number;
  /**
   * The longest the server may hold a synced write's reply, ms (default 1 000): set it to at
   * least the server's `lock.sync-timeout-ms` (1 000 by default), after which the server
   * refuses a write the in-sync set did not acknowledge. The reply is given up on this long
   * plus `timeoutMargin` after it was sent (beyond a wait's own time): a lost reply, whose
   * connection is closed — which makes the server release a grant it still held for it. It
   * also bounds the wait for a connection of the sync pool, and is the timeout of a `WAIT` /
   * `WAITAOF` the client sends.
   */
  timeout?: number;
  /** The master must also have the write in its AOF on disk: `WAITAOF 1 0` behind a write
   * synced to the in-sync set, `WAITAOF 1 n` instead of `WAIT n` with a fixed count (Redis
   * 7.2+, Valkey 8+, with `appendonly yes`). */
  aof?: boolean;
}

/**
 * A grant or renewal does not count: `reason` says what was missing — the in-sync set was
 * smaller than `lock.min-insync-replicas`, not every member acknowledged it within the server's
 * sync timeout, the server is no longer a master, fewer than a fixed `replicas` count
 * acknowledged, the master did not fsync its AOF — or no connection came free for it within the
 * sync timeout (nothing was sent). Not "busy": the lock was free, the replicas were not there.
 *
 * A grant the server refused is not held (`released`): the server gave it back as the owner's
 * `LOCK.RELEASE` would — an acquire's grant (synced in a batch behind `LOCK.SYNC`, which undoes
 * nothing: given back by the client, before it rejects), a re-entry's new hold, and a
 * downgrade's or upgrade's holding — except on a server that is no longer a master, which could not: the new
 * master may have the grant ({@link isDemoted}; an acquire's is released there in the
 * background, owner-checked). One that missed a client-side `WAIT` is released by the client
 * (a downgrade or upgrade stays made on the master). A renewal that does not count leaves the
 * holding's lease the last one that counted.
 */
export class NotReplicatedError extends Error {
  override name = 'NotReplicatedError';

  /** `acked`, `wanted`: how many replicas acknowledged, how many had to — for a client-side
   * `WAIT` (a fixed `replicas` count); 0 and 0 when the server refused it (`reason` says what
   * was missing); `write`: what did not count (`'grant'` for an acquire, a re-entry, a
   * downgrade and an upgrade); `reason`: why; `released`: the grant was released (by the
   * server, or for an acquire synced in a batch by the client, before it rejected). */
  constructor(
    readonly acked: number,
    readonly wanted: number,
    readonly write: Write = 'grant',
    readonly reason = `${acked} of the ${wanted} replicas wanted acknowledged in time`,
    readonly released = false,
  ) {
    super(
      write === 'command'
        ? `the command ran on the master, but a failover may lose its write: ${reason}`
        : `the ${write} does not count: ${reason}${released ? '; the server released it' : ''}`,
    );
  }
}

/** What a synced write is: a grant (an acquire, a re-entry, a downgrade, an upgrade), a
 * renewal, or a guarded or fenced command (`LOCK.GUARD`, `LOCK.FENCED`). */
export type Write = 'grant' | 'renewal' | 'command';

/**
 * A guarded command ({@link Holding.guard}, `LOCK.GUARD`) was refused: the lock is free, held by
 * another owner, or held by this owner with another fencing token (the holding was lost and
 * taken again) — the message, the server's, says which. The command did not run.
 */
export class NotHeldError extends Error {
  override name = 'NotHeldError';
}

/**
 * A fenced command ({@link Holding.fenced}, {@link fenced}, `LOCK.FENCED`) was refused: its
 * token is below the largest that already ran a command through the fence — a newer holder
 * wrote first. The command did not run.
 */
export class StaleTokenError extends Error {
  override name = 'StaleTokenError';
  /** The token the command came with. */
  readonly token: number;
  /** The largest token that ran a command through the fence. */
  readonly largest: number;

  constructor(message: string) {
    super(message);
    const found = /^STALE token (\d+) is below (\d+)/.exec(message);
    this.token = found ? Number(found[1]) : NaN;
    this.largest = found ? Number(found[2]) : NaN;
  }
}

/** The sync timeout by default, ms: the server's `lock.sync-timeout-ms` by default. */
export const DEFAULT_SYNC_TIMEOUT = 1_000;

/** What a module without synced writes (before 0.7.0) answers to `SYNC` and `NOSYNC`. */
const SYNTAX_ERROR = /^ERR syntax error/;

/** What was missing when the server became a replica while it held the reply. */
const DEMOTED = 'this server is no longer a master';

/** A grant refused by a master that became a replica while it held the reply: it could not
 * release it, and the new master may have it. */
export function isDemoted(error: unknown): boolean {
  return error instanceof NotReplicatedError && error.write === 'grant' && error.reason === DEMOTED;
}

/**
 * A lock write's error reply as the package reports it: `NOREPLICAS <missing>; <meaning>` as a
 * {@link NotReplicatedError} of `write` (`reason`: what was missing; `released` for a grant
 * the server says it released);
 * `ERR syntax error` — a module older than 0.7.0 answers it to `SYNC` and `NOSYNC` — as an
 * error that says this package needs lock module 0.7.0 or later; anything else as it is. For a
 * guarded or fenced `command`: `NOTHELD` as a {@link NotHeldError}, `STALE` as a {@link
 * StaleTokenError}, and the command's own errors as they are.
 */
export function refusalOf(reply: Error, write: Write): Error {
  const refused = /^NOREPLICAS ([^;]*)/.exec(reply.message);
  if (refused) {
    const released = write === 'grant' && reply.message.includes('; the grant was released');
    return new NotReplicatedError(0, 0, write, refused[1], released);
  }
  if (write === 'command') {
    // The command's own errors (its `ERR syntax error` too) stay as they are.
    if (reply.message.startsWith('NOTHELD ')) return new NotHeldError(reply.message, { cause: reply });
    if (reply.message.startsWith('STALE ')) return new StaleTokenError(reply.message);
    return reply;
  }
  if (SYNTAX_ERROR.test(reply.message)) return tooOld(reply, 'a lock write with SYNC or NOSYNC');
  return reply;
}

/** What a module older than 0.7.0 answers to `LOCK.SYNC` (Redis: `'LOCK.SYNC'`, Valkey: a
 * backquote or the same). */
const UNKNOWN_SYNC = /^ERR unknown command [`']lock\.sync/i;

/** An error that says this package needs lock module 0.7.0 or later, the server's `reply` to
 * `what` its cause. */
function tooOld(reply: Error, what: string): Error {
  return new Error(`the server answered "${reply.message}" to ${what}: this package needs the lock module 0.7.0 or later`, { cause: reply });
}

/**
 * Why the writes sent with `NOSYNC` before a `LOCK.SYNC` do not count, from its `reply`
 * (batch.ts); undefined when it is `OK`. `NOREPLICAS <missing>; <meaning>` is the {@link
 * NotReplicatedError} a `SYNC` write of `write` refused for the same reason gets — `released`
 * for a grant, which the client gives back ({@link Writes}), unless the server is no longer a
 * master (`reason` then the same as a `SYNC` write's, {@link isDemoted}); so is Redis's
 * `UNBLOCKED` (the master turned replica while it held the reply); `ERR unknown command` says the
 * module is older than 0.7.0; any other error reply is as it is.
 */
export function unsyncedBy(reply: unknown, write: Write): Error | undefined {
  if (reply === 'OK') return undefined;
  if (!(reply instanceof Error)) return new Error(`LOCK.SYNC replied ${String(reply)}, not OK`);
  const refused = /^NOREPLICAS ([^;]*)/.exec(reply.message);
  if (refused) return new NotReplicatedError(0, 0, write, refused[1], write === 'grant' && refused[1] !== DEMOTED);
  if (reply.message.startsWith('UNBLOCKED')) return new NotReplicatedError(0, 0, write, DEMOTED);
  if (UNKNOWN_SYNC.test(reply.message)) return tooOld(reply, 'LOCK.SYNC');
  return reply;
}

/** `WAIT n timeout` or `WAITAOF 1 n timeout`, `timeoutMs` at least 1 (0 would be no limit). */
export function waitCommand(sync: SyncOptions, replicas: number, timeoutMs: number): string[] {
  const timeout = String(Math.max(Math.ceil(timeoutMs), 1));
  return sync.aof ? ['WAITAOF', '1', String(replicas), timeout] : ['WAIT', String(replicas), timeout];
}

/**
 * Why a `write` does not count after all, from the `reply` to the `WAIT n` / `WAITAOF 1 n`
 * the client sent behind it (`replicas`: n), or `undefined` when it counts: the `WAIT`'s error
 * reply as it is; a {@link NotReplicatedError} when fewer than `replicas` acknowledged, or
 * (`WAITAOF`) the master did not fsync. `timeoutMs`, the `WAIT`'s timeout, is for the reason.
 */
export function shortfall(
  sync: SyncOptions,
  replicas: number,
  reply: unknown,
  timeoutMs: number,
  write: Write,
): Error | undefined {
  if (reply instanceof Error) return reply;
  const [local, acked] = sync.aof ? (reply as unknown[]).map(Number) : [1, Number(reply)];
  if (local < 1) return new NotReplicatedError(acked, replicas, write, `the master did not fsync its AOF within ${timeoutMs} ms`);
  if (acked < replicas) {
    return new NotReplicatedError(acked, replicas, write, `${acked} of the ${replicas} replicas wanted acknowledged within ${timeoutMs} ms`);
  }
  return undefined;
}
