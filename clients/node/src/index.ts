/**
 * Locks, read-write locks and semaphores on the leasehold Redis module (module `lock`, the
 * `LOCK.*` commands) for node-redis (v4 and later) and ioredis.
 *
 * - Waiting happens in the server (`LOCK.ACQUIRE ... WAIT`), in arrival order, on a duplicate
 *   connection with no timeout shorter than the wait; a lost reply is followed up by asking
 *   again with the same owner, so a caller never holds a lock it was told it did not get.
 * - Every holding has a fencing token, a JS `number` (tokens stay below 2^53).
 * - `using(routine)` renews the lease every third of it and hands the routine an `AbortSignal`
 *   that fires when the lease is lost; renewal failures never throw into nowhere.
 * - ioredis's `keyPrefix` is applied to the lock's key (ioredis does not apply it to module
 *   commands).
 *
 * Times are milliseconds.
 *
 * @example
 * ```js
 * import { createClient } from 'redis';
 * import { createLock } from 'leasehold';
 *
 * const client = await createClient().connect();
 * const lock = createLock(client, 'invoice:42', { ttl: 10_000 });
 * await lock.using(async (signal, holding) => {
 *   await writeInvoice(data, { fencingToken: holding.token, signal });
 * }, { wait: 5_000 });
 * ```
 */

import { randomUUID } from 'node:crypto';

import { Client, Connection, LostReply, isTryAgain } from './connection.js';

export type { Client, IORedisClient, NodeRedisClient, NodeRedisDuplicate } from './connection.js';
export { LostReply } from './connection.js';

/** How a lock is taken and kept. */
export interface LockOptions {
  /** The lease, ms (default 30 000). */
  ttl?: number;
  /** The owner (1 to 256 bytes; default a new random UUID). */
  owner?: string;
  /** Each acquire by the holder counts one more hold (`REENTRANT`). */
  reentrant?: boolean;
  /** Renew the lease every third of it until release (always on in `using`). */
  watchdog?: boolean;
  /** How long after a wait should have ended the client stops waiting for the reply and asks
   * for itself, ms (default 1 000). */
  timeoutMargin?: number;
}

/** How long to wait for a busy lock. */
export interface WaitOptions {
  /** ms; omitted: as long as it takes. */
  wait?: number;
}

/** A held lock. */
export interface Holding {
  /** The fencing token: larger than every earlier holding's. Send it with every write. */
  readonly token: number;
  /** Aborted when the lease is known lost: a renewal was refused, or the lease ran out while
   * renewals failed. Never aborted by a release. */
  readonly signal: AbortSignal;
  /** Resets the lease to `ttl` ms (default: the lock's). False when it was lost (and then
   * `signal` aborts); a lost lock is never taken back. */
  renew(ttl?: number): Promise<boolean>;
  /** Stops renewing and releases. True if it was still held. */
  release(): Promise<boolean>;
}

/** A lock (exclusive, a reader, or a semaphore permit) as one owner. */
export interface Lock {
  /** The key. */
  readonly name: string;
  /** The owner it acquires as (a semaphore: a new one per permit). */
  readonly owner: string;
  /** Takes it now, or `null` when busy. */
  tryAcquire(): Promise<Holding | null>;
  /** Takes it, waiting up to `wait` ms (`null` when still busy), or as long as it takes. */
  acquire(options?: WaitOptions): Promise<Holding | null>;
  /**
   * Takes it (waiting as `acquire`), runs `routine` with a signal that aborts if the lease is
   * lost, renews the lease meanwhile, and releases when `routine` ends, however it ends.
   * Rejects when the lock stayed busy.
   */
  using<T>(
    routine: (signal: AbortSignal, holding: Holding) => Promise<T>,
    options?: WaitOptions,
  ): Promise<T>;
}

/** The module's options for the kind of lock. */
type Mode = readonly string[];

const DEFAULT_TTL = 30_000;
const DEFAULT_MARGIN = 1_000;

/** An exclusive lock named `name`. */
export function createLock(client: Client, name: string, options: LockOptions = {}): Lock {
  return new LeaseholdLock(new Connection(client), name, options, [], () => options.owner ?? randomUUID());
}

/** A read-write lock: many readers or one writer, fair between them. Both sides share one
 * owner, so the writer can downgrade to a reader and the only reader can upgrade. */
export function createReadWriteLock(
  client: Client,
  name: string,
  options: LockOptions = {},
): { read: Lock; write: Lock } {
  const connection = new Connection(client);
  const owner = options.owner ?? randomUUID();
  return {
    read: new LeaseholdLock(connection, name, options, ['SHARED'], () => owner),
    write: new LeaseholdLock(connection, name, options, [], () => owner),
  };
}

/** A semaphore: at most `permits` holders, each acquire a new permit with its own owner. */
export function createSemaphore(
  client: Client,
  name: string,
  permits: number,
  options: LockOptions = {},
): Lock {
  const mode = ['SHARED', 'LIMIT', String(permits)];
  return new LeaseholdLock(new Connection(client), name, options, mode, () => randomUUID());
}

class LeaseholdLock implements Lock {
  private readonly key: string;
  private readonly ttl: number;
  private readonly fixedOwner: string;

  constructor(
    private readonly connection: Connection,
    readonly name: string,
    private readonly options: LockOptions,
    private readonly mode: Mode,
    private readonly nextOwner: () => string,
  ) {
    this.key = connection.prefix + name;
    this.ttl = options.ttl ?? DEFAULT_TTL;
    this.fixedOwner = nextOwner();
  }

  get owner(): string {
    return this.fixedOwner;
  }

  private ownerForAcquire(): string {
    return this.mode.includes('LIMIT') ? this.nextOwner() : this.fixedOwner;
  }

  private command(owner: string, waitMs?: number): string[] {
    const command = ['LOCK.ACQUIRE', this.key, owner, String(this.ttl)];
    if (this.options.reentrant) command.push('REENTRANT');
    command.push(...this.mode);
    if (waitMs !== undefined) command.push('WAIT', String(waitMs));
    return command;
  }

  async tryAcquire(): Promise<Holding | null> {
    return this.tryAs(this.ownerForAcquire(), this.options.watchdog ?? false);
  }

  private async tryAs(owner: string, watchdog: boolean): Promise<Holding | null> {
    try {
      const token = await this.connection.send(this.command(owner));
      return token === null ? null : this.hold(owner, Number(token), watchdog);
    } catch (error) {
      if (isTryAgain(error)) return null;
      throw error;
    }
  }

  acquire(options: WaitOptions = {}): Promise<Holding | null> {
    return this.acquireAs(this.ownerForAcquire(), options, this.options.watchdog ?? false);
  }

  private async acquireAs(owner: string, options: WaitOptions, watchdog: boolean): Promise<Holding | null> {
    const deadline = options.wait === undefined ? undefined : Date.now() + options.wait;
    for (;;) {
      const left = deadline === undefined ? undefined : deadline - Date.now();
      if (left !== undefined && left <= 0) return this.tryAs(owner, watchdog);
      // WAIT takes whole ms; 0 would mean "no limit".
      const waitMs = left === undefined ? 0 : Math.max(Math.ceil(left), 1);
      try {
        const token = await this.connection.sendWaiting(
          this.command(owner, waitMs),
          waitMs,
          this.options.timeoutMargin ?? DEFAULT_MARGIN,
        );
        return token === null ? null : this.hold(owner, Number(token), watchdog);
      } catch (error) {
        if (isTryAgain(error)) {
          await sleep(10);
        } else if (error instanceof LostReply) {
          const recovered = await this.recover(owner, watchdog);
          if (recovered) return recovered;
        } else {
          throw error;
        }
      }
    }
  }

  /** The reply to a wait was lost: asks again without waiting, with the same owner (a holder
   * gets its token back). If even that fails, releases in the background. */
  private async recover(owner: string, watchdog: boolean): Promise<Holding | null> {
    try {
      return await this.tryAs(owner, watchdog);
    } catch (error) {
      void this.releaseEventually(owner);
      throw error;
    }
  }

  private async releaseEventually(owner: string): Promise<void> {
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        await this.connection.send(['LOCK.RELEASE', this.key, owner]);
        return;
      } catch {
        await sleep(Math.min(10 * 2 ** attempt, 1_000));
      }
    }
  }

  async using<T>(
    routine: (signal: AbortSignal, holding: Holding) => Promise<T>,
    options: WaitOptions = {},
  ): Promise<T> {
    const holding = await this.acquireAs(this.ownerForAcquire(), options, true);
    if (!holding) throw new Error(`the lock ${this.name} stayed busy`);
    try {
      return await routine(holding.signal, holding);
    } finally {
      await holding.release().catch(() => false);
    }
  }

  private hold(owner: string, token: number, watchdog: boolean): Holding {
    return new Held(this.connection, this.key, owner, token, this.ttl, watchdog);
  }
}

class Held implements Holding {
  private readonly lost = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private released = false;
  private heldUntil: number;

  constructor(
    private readonly connection: Connection,
    private readonly key: string,
    private readonly owner: string,
    readonly token: number,
    private readonly ttl: number,
    watchdog: boolean,
  ) {
    this.heldUntil = Date.now() + ttl;
    if (watchdog) this.schedule();
  }

  get signal(): AbortSignal {
    return this.lost.signal;
  }

  async renew(ttl: number = this.ttl): Promise<boolean> {
    const renewed = (await this.connection.send(['LOCK.RENEW', this.key, this.owner, String(ttl)])) === 1;
    if (!renewed) this.lose();
    return renewed;
  }

  async release(): Promise<boolean> {
    this.released = true;
    clearTimeout(this.timer);
    return (await this.connection.send(['LOCK.RELEASE', this.key, this.owner])) === 1;
  }

  /** The watchdog: renews every third of the lease; stops for good on release and on loss. */
  private schedule(): void {
    this.timer = setTimeout(() => void this.tick(), this.ttl / 3);
    this.timer.unref?.();
  }

  private async tick(): Promise<void> {
    if (this.released) return;
    const sent = Date.now();
    try {
      if (!(await this.renew())) return;
      this.heldUntil = sent + this.ttl;
    } catch {
      if (Date.now() >= this.heldUntil) {
        this.lose();
        return;
      }
    }
    if (!this.released) this.schedule();
  }

  private lose(): void {
    clearTimeout(this.timer);
    if (!this.lost.signal.aborted) this.lost.abort(new Error('the lock lease was lost'));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
