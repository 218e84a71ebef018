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
/** The key of a lock, or the keys of a set taken together (whose commands are `LOCK.M*`). */
class Keys {
    keys;
    set;
    constructor(keys, set) {
        this.keys = keys;
        this.set = set;
    }
    /** The key a command is routed by: the lock's, a set's first (a set lives in one slot). */
    get first() {
        return this.keys[0];
    }
    /** `LOCK.<verb> key owner ...rest`, or for a set `LOCK.M<verb> numkeys ...keys owner ...rest`. */
    command(verb, owner, ...rest) {
        if (!this.set)
            return [`LOCK.${verb}`, this.first, owner, ...rest];
        return [`LOCK.M${verb}`, String(this.keys.length), ...this.keys, owner, ...rest];
    }
    /** Whether a `RELEASE` / `RENEW` reply (a set's: how many) covers every key. */
    whole(reply) {
        return Number(reply) === (this.set ? this.keys.length : 1);
    }
}
/** `LOCK.ACQUIRE key owner ttl [REENTRANT] [SHARED [LIMIT n]]` (a set: `LOCK.MACQUIRE`). */
function acquireCommand(keys, owner, ttl, mode, reentrant) {
    return keys.command('ACQUIRE', owner, String(ttl), ...(reentrant ? ['REENTRANT'] : []), ...mode);
}
/** An exclusive lock named `name`. */
export function createLock(client, name, options = {}) {
    return new LeaseholdLock(new Connection(client), [name], options, EXCLUSIVE);
}
/**
 * Several locks taken together, exclusively, all or none (`LOCK.MACQUIRE`): a waiting set is
 * granted all its keys in one step, in one arrival order with every other waiter of any of
 * them, so sets asked for in any key order never deadlock, and nobody holds part of a set while
 * waiting for the rest. The holding has every token (`tokens`); its watchdog renews all the
 * leases together (`LOCK.MRENEW`, all or none: a set with one lease run out is lost), and
 * release frees them all (`LOCK.MRELEASE`). In Redis Cluster the keys must share a slot (hash
 * tags: `{order:42}:payment`). Re-entering, downgrading and upgrading are for single locks.
 */
export function createMultiLock(client, names, options = {}) {
    if (names.length === 0)
        throw new Error('a multi-lock needs at least one name');
    return new LeaseholdLock(new Connection(client), names, options, EXCLUSIVE, true);
}
/** A read-write lock: many readers or one writer, fair between them. Every acquire on either
 * side is a new owner; a writer downgrades to a reader, and the only reader upgrades, through
 * its holding. */
export function createReadWriteLock(client, name, options = {}) {
    const connection = new Connection(client);
    return {
        read: new LeaseholdLock(connection, [name], options, SHARED),
        write: new LeaseholdLock(connection, [name], options, EXCLUSIVE),
    };
}
/** A semaphore: at most `permits` holders, each acquire a new permit with its own owner. */
export function createSemaphore(client, name, permits, options = {}) {
    const mode = ['SHARED', 'LIMIT', String(permits)];
    return new LeaseholdLock(new Connection(client), [name], options, mode);
}
class LeaseholdLock {
    connection;
    names;
    options;
    mode;
    keys;
    /** The key commands are routed by. */
    key;
    ttl;
    constructor(connection, names, options, mode, set = false) {
        this.connection = connection;
        this.names = names;
        this.options = options;
        this.mode = mode;
        this.keys = new Keys(names.map((name) => connection.prefix + name), set);
        this.key = this.keys.first;
        this.ttl = options.ttl ?? DEFAULT_TTL;
    }
    get name() {
        return this.names[0];
    }
    get owner() {
        return this.options.owner;
    }
    /** The owner of the next acquisition: the fixed one, or a new one. */
    ownerForAcquire() {
        return this.options.owner ?? randomUUID();
    }
    command(owner, waitMs) {
        const command = acquireCommand(this.keys, owner, this.ttl, this.mode, this.options.reentrant ?? false);
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
        const tokens = await tryTokens(this.connection, this.command(owner), this.key);
        return tokens === null ? null : this.hold(owner, tokens, watchdog);
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
        const [reply, synced] = await this.connection.sendOwn(this.key, this.command(owner, waitMs), timeout, then);
        const tokens = tokensOf(reply);
        if (tokens === null)
            return null;
        const acked = wanted > 0 ? ackedBy(sync, synced) : 0;
        if (acked < wanted) {
            this.connection.learned(this.key).askAgain();
            await this.connection.send(this.keys.command('RELEASE', owner), this.key);
            throw new NotReplicatedError(acked, wanted);
        }
        return this.hold(owner, tokens, watchdog);
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
                await this.connection.send(this.keys.command('RELEASE', owner), this.key);
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
    hold(owner, tokens, watchdog) {
        return new Held(this.connection, this.keys, owner, tokens, this.ttl, this.mode, watchdog);
    }
}
class Held {
    connection;
    keys;
    owner;
    tokens;
    ttl;
    mode;
    lost = new AbortController();
    timer;
    released = false;
    heldUntil;
    constructor(connection, keys, owner, tokens, ttl, mode, watchdog) {
        this.connection = connection;
        this.keys = keys;
        this.owner = owner;
        this.tokens = tokens;
        this.ttl = ttl;
        this.mode = mode;
        this.heldUntil = Date.now() + ttl;
        if (watchdog)
            this.schedule();
    }
    get signal() {
        return this.lost.signal;
    }
    get token() {
        return Math.max(...this.tokens);
    }
    async renew(ttl = this.ttl) {
        const renewed = this.keys.whole(await this.connection.send(this.keys.command('RENEW', this.owner, String(ttl)), this.keys.first));
        if (!renewed)
            this.lose();
        return renewed;
    }
    async release() {
        this.released = true;
        clearTimeout(this.timer);
        return this.keys.whole(await this.connection.send(this.keys.command('RELEASE', this.owner), this.keys.first));
    }
    async reenter(ttl = this.ttl) {
        const tokens = await this.acquire('reenter', ttl, this.mode, true);
        return tokens === null ? null : new Held(this.connection, this.keys, this.owner, tokens, ttl, this.mode, false);
    }
    downgrade(ttl = this.ttl) {
        return this.changeMode(ttl, SHARED);
    }
    upgrade(ttl = this.ttl) {
        return this.changeMode(ttl, EXCLUSIVE);
    }
    async changeMode(ttl, mode) {
        const tokens = await this.acquire(mode === SHARED ? 'downgrade' : 'upgrade', ttl, mode, false);
        if (tokens === null)
            return false;
        this.mode = mode;
        this.tokens = tokens;
        return true;
    }
    /** `LOCK.ACQUIRE` as this holding's owner, for `what` (a single lock's): the token, or null
     * when not granted. */
    acquire(what, ttl, mode, reentrant) {
        if (this.keys.set)
            return Promise.reject(new Error(`${what} is not supported on a set of locks`));
        return tryTokens(this.connection, acquireCommand(this.keys, this.owner, ttl, mode, reentrant), this.keys.first);
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
/** A grant's tokens: `LOCK.ACQUIRE`'s one, or `LOCK.MACQUIRE`'s array, one per key; null when
 * busy. */
function tokensOf(reply) {
    if (reply === null || reply === undefined)
        return null;
    return Array.isArray(reply) ? reply.map(Number) : [Number(reply)];
}
/** Sends an acquire that does not wait: the tokens, or null when busy (or when the server cannot
 * issue a token yet: `TRYAGAIN`). */
async function tryTokens(connection, command, key) {
    try {
        return tokensOf(await connection.send(command, key));
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
