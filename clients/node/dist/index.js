/**
 * Locks, read-write locks and semaphores on the leasehold Redis module (module `lock`, the
 * `LOCK.*` commands) for node-redis (v4 and later) and ioredis.
 *
 * - Every acquire is a new owner, kept by the `Holding` it returns: one lock object shared by
 *   concurrent calls excludes them like a mutex (as node-redlock's new random value per
 *   acquire). A holder re-enters, downgrades or upgrades through its holding.
 * - Waiting happens in the server (`LOCK.ACQUIRE ... WAIT`), in arrival order, on a duplicate
 *   connection with no timeout shorter than the wait; a lost reply is followed up by asking
 *   again as the same owner, so a caller never holds a lock it was told it did not get.
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
import { Connection, LostReply, isTryAgain } from './connection.js';
import { DEFAULT_SYNC_TIMEOUT, NotReplicatedError, ackedBy, waitCommand } from './sync.js';
export { LostReply } from './connection.js';
export { NotReplicatedError } from './sync.js';
const DEFAULT_TTL = 30_000;
const DEFAULT_MARGIN = 1_000;
const EXCLUSIVE = [];
const SHARED = ['SHARED'];
/** `LOCK.ACQUIRE key owner ttl [REENTRANT] [SHARED [LIMIT n]]`. */
function acquireCommand(key, owner, ttl, mode, reentrant) {
    return ['LOCK.ACQUIRE', key, owner, String(ttl), ...(reentrant ? ['REENTRANT'] : []), ...mode];
}
/** An exclusive lock named `name`. */
export function createLock(client, name, options = {}) {
    return new LeaseholdLock(new Connection(client), name, options, EXCLUSIVE);
}
/** A read-write lock: many readers or one writer, fair between them. Every acquire on either
 * side is a new owner; a writer downgrades to a reader, and the only reader upgrades, through
 * its holding. */
export function createReadWriteLock(client, name, options = {}) {
    const connection = new Connection(client);
    return {
        read: new LeaseholdLock(connection, name, options, SHARED),
        write: new LeaseholdLock(connection, name, options, EXCLUSIVE),
    };
}
/** A semaphore: at most `permits` holders, each acquire a new permit with its own owner. */
export function createSemaphore(client, name, permits, options = {}) {
    const mode = ['SHARED', 'LIMIT', String(permits)];
    return new LeaseholdLock(new Connection(client), name, options, mode);
}
class LeaseholdLock {
    connection;
    name;
    options;
    mode;
    key;
    ttl;
    constructor(connection, name, options, mode) {
        this.connection = connection;
        this.name = name;
        this.options = options;
        this.mode = mode;
        this.key = connection.prefix + name;
        this.ttl = options.ttl ?? DEFAULT_TTL;
    }
    get owner() {
        return this.options.owner;
    }
    /** The owner of the next acquisition: the fixed one, or a new one. */
    ownerForAcquire() {
        return this.options.owner ?? randomUUID();
    }
    command(owner, waitMs) {
        const command = acquireCommand(this.key, owner, this.ttl, this.mode, this.options.reentrant ?? false);
        if (waitMs !== undefined)
            command.push('WAIT', String(waitMs));
        return command;
    }
    async tryAcquire() {
        return this.tryAs(this.ownerForAcquire(), this.options.watchdog ?? false);
    }
    async tryAs(owner, watchdog) {
        const wanted = await this.replicasWanted();
        if (wanted > 0) {
            try {
                return await this.grant(owner, undefined, wanted, watchdog);
            }
            catch (error) {
                if (isTryAgain(error))
                    return null;
                if (error instanceof LostReply)
                    void this.releaseEventually(owner);
                throw error;
            }
        }
        const token = await tryToken(this.connection, this.command(owner));
        return token === null ? null : this.hold(owner, token, watchdog);
    }
    /** How many replicas a grant must reach: as `sync` says, or as many as the master has
     * online (asked now and then, never lowered for the same master). */
    async replicasWanted() {
        const sync = this.options.sync;
        if (sync === false)
            return 0;
        if (sync?.replicas !== undefined)
            return sync.replicas;
        const learned = this.connection.learned(this.key);
        return learned.fresh() ?? learned.heard(String(await this.connection.sendToMaster(this.key, ['INFO', 'replication'])));
    }
    /**
     * `LOCK.ACQUIRE` on a connection of its own — with `WAIT waitMs` when given (0: no limit) —
     * then, for a grant, the `WAIT` for `wanted` replicas on the same connection. A grant too
     * few replicas have is released: {@link NotReplicatedError}.
     */
    async grant(owner, waitMs, wanted, watchdog) {
        const sync = this.options.sync || {};
        const syncMs = wanted > 0 ? (sync.timeout ?? DEFAULT_SYNC_TIMEOUT) : 0;
        const margin = this.options.timeoutMargin ?? DEFAULT_MARGIN;
        const timeout = waitMs === 0 ? undefined : (waitMs ?? 0) + margin + syncMs;
        const then = wanted > 0 ? waitCommand(sync, wanted) : undefined;
        const [token, synced] = await this.connection.sendOwn(this.key, this.command(owner, waitMs), timeout, then);
        if (token === null)
            return null;
        const acked = wanted > 0 ? ackedBy(sync, synced) : 0;
        if (acked < wanted) {
            this.connection.learned(this.key).askAgain();
            await this.connection.send(['LOCK.RELEASE', this.key, owner]);
            throw new NotReplicatedError(acked, wanted);
        }
        return this.hold(owner, Number(token), watchdog);
    }
    acquire(options = {}) {
        return this.acquireAs(this.ownerForAcquire(), options, this.options.watchdog ?? false);
    }
    async acquireAs(owner, options, watchdog) {
        const deadline = options.wait === undefined ? undefined : Date.now() + options.wait;
        for (;;) {
            const left = deadline === undefined ? undefined : deadline - Date.now();
            if (left !== undefined && left <= 0)
                return this.tryAs(owner, watchdog);
            // WAIT takes whole ms; 0 would mean "no limit".
            const waitMs = left === undefined ? 0 : Math.max(Math.ceil(left), 1);
            try {
                return await this.grant(owner, waitMs, await this.replicasWanted(), watchdog);
            }
            catch (error) {
                if (isTryAgain(error)) {
                    await sleep(10);
                }
                else if (error instanceof NotReplicatedError) {
                    if (deadline === undefined || Date.now() >= deadline)
                        throw error;
                }
                else if (error instanceof LostReply) {
                    const recovered = await this.recover(owner, watchdog);
                    if (recovered)
                        return recovered;
                }
                else {
                    throw error;
                }
            }
        }
    }
    /** The reply to a wait was lost: asks again without waiting, with the same owner (a holder
     * gets its token back). If even that fails, releases in the background. */
    async recover(owner, watchdog) {
        try {
            return await this.tryAs(owner, watchdog);
        }
        catch (error) {
            void this.releaseEventually(owner);
            throw error;
        }
    }
    async releaseEventually(owner) {
        for (let attempt = 0; attempt < 20; attempt++) {
            try {
                await this.connection.send(['LOCK.RELEASE', this.key, owner]);
                return;
            }
            catch {
                await sleep(Math.min(10 * 2 ** attempt, 1_000));
            }
        }
    }
    async using(routine, options = {}) {
        const holding = await this.acquireAs(this.ownerForAcquire(), options, true);
        if (!holding)
            throw new Error(`the lock ${this.name} stayed busy`);
        try {
            return await routine(holding.signal, holding);
        }
        finally {
            await holding.release().catch(() => false);
        }
    }
    hold(owner, token, watchdog) {
        return new Held(this.connection, this.key, owner, token, this.ttl, this.mode, watchdog);
    }
}
class Held {
    connection;
    key;
    owner;
    token;
    ttl;
    mode;
    lost = new AbortController();
    timer;
    released = false;
    heldUntil;
    constructor(connection, key, owner, token, ttl, mode, watchdog) {
        this.connection = connection;
        this.key = key;
        this.owner = owner;
        this.token = token;
        this.ttl = ttl;
        this.mode = mode;
        this.heldUntil = Date.now() + ttl;
        if (watchdog)
            this.schedule();
    }
    get signal() {
        return this.lost.signal;
    }
    async renew(ttl = this.ttl) {
        const renewed = (await this.connection.send(['LOCK.RENEW', this.key, this.owner, String(ttl)])) === 1;
        if (!renewed)
            this.lose();
        return renewed;
    }
    async release() {
        this.released = true;
        clearTimeout(this.timer);
        return (await this.connection.send(['LOCK.RELEASE', this.key, this.owner])) === 1;
    }
    async reenter(ttl = this.ttl) {
        const token = await this.acquire(ttl, this.mode, true);
        return token === null ? null : new Held(this.connection, this.key, this.owner, token, ttl, this.mode, false);
    }
    downgrade(ttl = this.ttl) {
        return this.changeMode(ttl, SHARED);
    }
    upgrade(ttl = this.ttl) {
        return this.changeMode(ttl, EXCLUSIVE);
    }
    async changeMode(ttl, mode) {
        const token = await this.acquire(ttl, mode, false);
        if (token === null)
            return false;
        this.mode = mode;
        this.token = token;
        return true;
    }
    /** `LOCK.ACQUIRE` as this holding's owner: the token, or null when not granted. */
    acquire(ttl, mode, reentrant) {
        return tryToken(this.connection, acquireCommand(this.key, this.owner, ttl, mode, reentrant));
    }
    /** The watchdog: renews every third of the lease; stops for good on release and on loss. */
    schedule() {
        this.timer = setTimeout(() => void this.tick(), this.ttl / 3);
        this.timer.unref?.();
    }
    async tick() {
        if (this.released)
            return;
        const sent = Date.now();
        try {
            if (!(await this.renew()))
                return;
            this.heldUntil = sent + this.ttl;
        }
        catch {
            if (Date.now() >= this.heldUntil) {
                this.lose();
                return;
            }
        }
        if (!this.released)
            this.schedule();
    }
    lose() {
        clearTimeout(this.timer);
        if (!this.lost.signal.aborted)
            this.lost.abort(new Error('the lock lease was lost'));
    }
}
/** Sends an acquire that does not wait: the token, or null when busy (or when the server cannot
 * issue a token yet: `TRYAGAIN`). */
async function tryToken(connection, command) {
    try {
        const token = await connection.send(command);
        return token === null ? null : Number(token);
    }
    catch (error) {
        if (isTryAgain(error))
            return null;
        throw error;
    }
}
function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}
