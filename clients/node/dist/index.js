/**
 * Locks, read-write locks and semaphores on the leasehold Redis module (module `lock`, the
 * `LOCK.*` commands) for node-redis (v4 and later) and ioredis.
 *
 * - Every acquire is a new owner, kept by the `Holding` it returns: one lock object shared by
 *   concurrent calls excludes them like a mutex (as node-redlock's new random value per
 *   acquire). A holder re-enters, downgrades or upgrades through its holding.
 * - Waiting happens in the server (`LOCK.ACQUIRE ... WAIT`), in arrival order, on a connection
 *   borrowed from a pool of duplicates of the client ({@link setPoolSizes}), with no timeout
 *   shorter than the wait; a lost reply is followed up by asking again as the same owner, so a
 *   caller never holds a lock it was told it did not get, and the connection is closed.
 * - Grants (a holder's re-entry, downgrade and upgrade too) and renewals count only once every
 *   replica of the master's in-sync set has them (`sync`): the server holds the reply until
 *   then (`SYNC`, or `LOCK.SYNC` behind a batch of the acquires and renewals sent at the same
 *   time; lock module 0.7.0 and later), or refuses the writes with `NOREPLICAS`.
 * - Every holding has a fencing token, a JS `number` (tokens stay below 2^53).
 * - `using(routine)` renews the lease every third of it — a renewal that did not count tried
 *   again within a second, until one does — and hands the routine an `AbortSignal` that fires
 *   when the lease is lost; renewal failures never throw into nowhere.
 * - Holdings are tied to the client's session (`LOCK.SESSION`, one per client and master, on a
 *   connection of its own kept attached by a heartbeat): when the program dies, the server
 *   releases them a grace after that connection closed, and hands them to the next waiter. The
 *   holder learns first: its `signal` aborts when no heartbeat was answered for a grace (less
 *   the drift allowance), before the server can hand the lock over ({@link setSessionOptions},
 *   the `session` option).
 * - ioredis's `keyPrefix` is applied to the lock's key (ioredis does not apply it to module
 *   commands).
 * - Elections ({@link Election}, `LOCK.CAMPAIGN`): a term is a held lock whose token is its
 *   epoch, kept and lost as a holding is, with `proclaim()` and `resign()`; `leader()` and
 *   `observe()` (every change, a vacancy always before the next leader) tell who leads.
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
import { Connection, Exhausted, LostReply, isTryAgain } from './connection.js';
import { observe, stateOf } from './election.js';
import { SESSION, countedLease, isNoSuchSession } from './session.js';
import { NotReplicatedError, isDemoted } from './sync.js';
import { Writes } from './writes.js';
export { LostReply, PoolClosed, setPoolSizes, setSessionOptions } from './connection.js';
export { NotHeldError, NotReplicatedError, StaleTokenError } from './sync.js';
const DEFAULT_TTL = 30_000;
const DEFAULT_MARGIN = 1_000;
/** How many times in a row an acquire tries again after `ERR no such session` (each time with
 * a new session) before it rejects with it. */
const SESSION_RETRIES = 3;
/** How soon a renewal that ties a holding to a new session is tried again after it failed, ms. */
const RETIE_RETRY_MS = 50;
/** How soon the watchdog tries a renewal that did not count again, ms: soon enough that a try
 * lands once the master dropped a lost replica from its in-sync set, well within the lease (each
 * synced try already waits up to the sync timeout for the replicas). */
const RENEW_RETRY_MS = 500;
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
/** `command` tied to the client's session on the master it is sent to, when `tied`: it ends in
 * `SESSION`, which goes as the connection's binding (`LOCK.SESSION USE`) or as `SESSION id`
 * when it is sent (`binding` in session.ts). */
function tiedCommand(command, tied) {
    return tied ? [...command, SESSION] : command;
}
/**
 * Runs one Redis command on `client` only when `token` is at least the largest fencing token
 * that ran a command through the fence `fence` — a key of the module's own type, made by the
 * first such command — and raises the fence to `token` (`LOCK.FENCED fence token SYNC command
 * ...`): check, command and fence in one step. `fenced(client, 'fence:stock:42', token,
 * 'DECRBY', 'stock:42', 1)` for a token from a lock elsewhere (another server, Redlock); a
 * holding's own: {@link Holding.fenced}. Resolves to the command's reply. Synced to the master's
 * in-sync replicas, on a connection of the sync pool (to sync otherwise, fence through a holding
 * of a lock with the `sync` you want). In Redis Cluster the command's keys must be in the fence's
 * slot (hash tags). Rejects with {@link StaleTokenError} when a larger token wrote first (the
 * command did not run), with {@link NotReplicatedError} (`write: 'command'`) when it ran on the
 * master but the replicas did not have it in time, with the command's own error, and with {@link
 * LostReply}.
 */
export function fenced(client, fence, token, ...command) {
    const connection = new Connection(client);
    const writes = new Writes(connection, connection.prefix + fence, undefined, DEFAULT_MARGIN);
    return fencedWith(writes, token, command);
}
/** `LOCK.FENCED fence token SYNC|NOSYNC command...` over `writes` (routed by the fence). */
function fencedWith(writes, token, command) {
    if (command.length === 0)
        return Promise.reject(new Error('fenced needs a command to run'));
    return writes.command(['LOCK.FENCED', writes.key, String(token), writes.flag, ...command.map(String)]);
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
/**
 * An election (the `LOCK.CAMPAIGN` family): a lock held by its leader, each term with an epoch
 * (its fencing token). `campaign(value)` waits in line (arrival order, in the server) to lead and
 * gives the {@link Leadership}: renewed, synced, tied to the client's session and lost-first as
 * a held lock ({@link LockOptions}), with `proclaim()` and `resign()`. `leader()` and
 * `observe()` tell anyone who leads.
 *
 * @example
 * ```js
 * const election = new Election(client, 'cron:leader', { ttl: 15_000, candidate: 'host-a' });
 * const leadership = await election.campaign('10.0.0.1:8080');
 * await runJobs({ fencingToken: leadership.epoch, signal: leadership.signal });
 * await leadership.resign();
 * ```
 */
export class Election {
    options;
    /** The election's key (without ioredis's `keyPrefix`). */
    name;
    connection;
    /** The key as sent: with ioredis's `keyPrefix`. */
    key;
    writes;
    constructor(client, name, options = {}) {
        this.options = options;
        this.name = name;
        this.connection = new Connection(client);
        this.key = this.connection.prefix + name;
        this.writes = new Writes(this.connection, this.key, options.sync, options.timeoutMargin ?? DEFAULT_MARGIN);
    }
    /** The candidate every campaign uses, if one was fixed; `undefined`: a new one per campaign
     * (`leadership.candidate` tells it). */
    get candidate() {
        return this.options.candidate;
    }
    /**
     * Campaigns to lead, proclaiming `value` (0 to 65 536 bytes; `LOCK.CAMPAIGN key candidate
     * value ttl [WAIT ms]`): resolves to the leadership once this candidate leads — at once, or
     * after the candidates that campaigned before it, in arrival order — waiting up to `wait` ms
     * (`null` when another still leads then; `wait: 0`: no waiting), or as long as it takes. Waits
     * and retries exactly as a lock's `acquire` ({@link Lock.acquire}): the same pools, sessions,
     * synced grants and lost-reply recovery.
     */
    async campaign(value, options = {}) {
        const { ttl, session, sync, timeoutMargin, candidate } = this.options;
        const key = this.key;
        const campaign = new LeaseholdLock(this.connection, [this.name], { ttl, session, sync, timeoutMargin, owner: candidate }, EXCLUSIVE, false, (owner, lease) => ['LOCK.CAMPAIGN', key, owner, value, String(lease)]);
        const held = await campaign.acquireAs(campaign.ownerForAcquire(), options, true);
        return held && new Led(held, this.writes, key, value);
    }
    /** Who leads now (`LOCK.LEADER`), over the client's own connection; nobody: `leader` null,
     * `epoch` 0. Any exclusive lock's holder counts as a leader, with an empty value. */
    async leader() {
        return stateOf(await this.connection.send(['LOCK.LEADER', this.key]));
    }
    /**
     * Every state of the election — who leads, or nobody — as it changes: the current one first,
     * then each that differs from the one before (`LOCK.OBSERVE key LAST epoch value BLOCK ms`).
     * A vacancy is always told before the next leader (even when the next candidate was elected
     * in the same step as a resignation or a crash); between two states, whole terms may be
     * missed, never out of order. Each call blocks in the server on a connection of the wait pool
     * (one per observer, while it waits); a lost reply (a dropped connection) is asked again on a
     * new one, missing nothing. Ends when `signal` aborts (or the loop is left); rejects on an
     * error reply or a failed connect.
     */
    observe(options = {}) {
        return observe(this.connection, this.key, this.options.timeoutMargin ?? DEFAULT_MARGIN, options.signal);
    }
}
/** An election named `name` ({@link Election}): `new Election(client, name, options)`. */
export function createElection(client, name, options = {}) {
    return new Election(client, name, options);
}
class LeaseholdLock {
    names;
    options;
    mode;
    words;
    keys;
    writes;
    ttl;
    /** Its holdings are tied to the client's session. */
    tied;
    constructor(connection, names, options, mode, set = false, 
    /** The acquire's words (default: `LOCK.ACQUIRE`'s, in this lock's mode). */
    words) {
        this.names = names;
        this.options = options;
        this.mode = mode;
        this.words = words;
        this.keys = new Keys(names.map((name) => connection.prefix + name), set);
        this.writes = new Writes(connection, this.keys.first, options.sync, options.timeoutMargin ?? DEFAULT_MARGIN);
        this.ttl = options.ttl ?? DEFAULT_TTL;
        this.tied = options.session !== false && connection.sessions;
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
        const command = this.words
            ? this.words(owner, this.ttl)
            : acquireCommand(this.keys, owner, this.ttl, this.mode, this.options.reentrant ?? false);
        if (waitMs !== undefined)
            command.push('WAIT', String(waitMs));
        return tiedCommand(command, this.tied);
    }
    release(owner) {
        return this.keys.command('RELEASE', owner);
    }
    async tryAcquire() {
        return this.tryAs(this.ownerForAcquire(), this.options.watchdog ?? false);
    }
    /** A grant without waiting, synced; a reply lost on its way back is released in the
     * background (the server may have granted it). */
    async tryAs(owner, watchdog) {
        for (let retries = 0;; retries++) {
            const began = Date.now();
            try {
                const grant = await grantTokens(this.writes, this.command(owner), this.release(owner), true);
                return await this.held(owner, grant, watchdog, began);
            }
            catch (error) {
                // The server did not know the session (a failover): a new one replaces it.
                if (isNoSuchSession(error) && retries < SESSION_RETRIES)
                    continue;
                // The grant may be on the server (the new master's, after a failover).
                if (error instanceof LostReply || isDemoted(error))
                    void this.releaseEventually(owner);
                throw error;
            }
        }
    }
    acquire(options = {}) {
        return this.acquireAs(this.ownerForAcquire(), options, this.options.watchdog ?? false);
    }
    /** An acquire as `first` (with `wait` left after a grant the replicas lacked on a demoted
     * master, as a new owner unless it is fixed), its holding watched by `watchdog`. */
    async acquireAs(first, options, watchdog) {
        let owner = first;
        const deadline = options.wait === undefined ? undefined : Date.now() + options.wait;
        for (let sessionRetries = 0;;) {
            const left = deadline === undefined ? undefined : deadline - Date.now();
            if (left !== undefined && left <= 0)
                return this.tryAs(owner, watchdog);
            // WAIT takes whole ms; 0 would mean "no limit".
            const waitMs = left === undefined ? 0 : Math.max(Math.ceil(left), 1);
            try {
                const granted = await this.writes.wait(this.command(owner, waitMs), waitMs, deadline, this.release(owner));
                const tokens = tokensOf(granted.reply);
                if (tokens === null)
                    return null;
                // The lease began when the server handed the lock over: at the earliest `began`.
                const holding = await this.held(owner, { tokens, tie: granted.tie }, watchdog, granted.began);
                if (holding)
                    return holding;
                // Granted, but lost with the session it was tied to before the grant came: wait again.
            }
            catch (error) {
                if (isNoSuchSession(error) && sessionRetries++ < SESSION_RETRIES) {
                    // The server did not know the session (a failover): a new one replaces it.
                }
                else if (isTryAgain(error)) {
                    await sleep(10);
                }
                else if (error instanceof NotReplicatedError) {
                    if (isDemoted(error)) {
                        // The new master may have the grant: released there in the background, and never
                        // asked for as that owner again (the release could take the next grant).
                        void this.releaseEventually(owner);
                        if (this.options.owner !== undefined)
                            throw error;
                        owner = this.ownerForAcquire();
                    }
                    if (deadline === undefined || Date.now() >= deadline)
                        throw error;
                }
                else if (error instanceof LostReply) {
                    const recovered = await this.recover(owner, watchdog);
                    if (recovered)
                        return recovered;
                }
                else if (!(error instanceof Exhausted)) {
                    // Exhausted: every wait connection stayed busy until the deadline; the loop's last
                    // try answers.
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
                await this.writes.connection.send(this.release(owner), this.keys.first);
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
    /**
     * The holding a grant gives, its lease begun at `began` (ms since the epoch), or null when it
     * was no grant. A grant whose reply came only after that lease ended (the server held it
     * until the replicas had it) is one nobody can count on (the lock may have been handed on
     * meanwhile): it is released and rejected with {@link NotReplicatedError}. A grant tied to a session whose deadline passed before it came
     * (the server may have ended that session, and released the lock) is renewed first, to the
     * lease it has left, tied to the client's current session: null when that is refused (or no
     * lease is left: then it is released).
     */
    async held(owner, grant, watchdog, began) {
        const { tokens, tie } = grant;
        if (tokens === null)
            return null;
        if (began + countedLease(this.ttl) <= Date.now()) {
            await this.writes.connection.send(this.release(owner), this.keys.first);
            throw new NotReplicatedError(0, 0, 'grant', 'its reply came only after its lease had ended');
        }
        const holding = new Held(this.writes, this.keys, owner, tokens, this.ttl, this.mode, watchdog, began, this.tied);
        if (!tie || tie.alive) {
            holding.tieTo(tie);
            return holding;
        }
        try {
            if (await holding.renewLeft())
                return holding;
            if (!holding.signal.aborted)
                await holding.release();
            return null;
        }
        catch (error) {
            void holding.release().catch(() => this.releaseEventually(owner));
            throw error;
        }
    }
}
class Held {
    writes;
    keys;
    owner;
    tokens;
    ttl;
    mode;
    watched;
    tied;
    /** Aborts when the holding is lost; made when its signal is first asked for (most holdings
     * are released without anyone asking), aborted at once if the loss came first. */
    lost;
    /** Why it was lost, once it was. */
    lostWhy;
    /** The session it is tied to, as far as this client knows. */
    tie;
    /** Lost with its session: never renewed (nor re-entered, nor changed) again. */
    gone = false;
    /** The watchdog's next renewal. */
    timer;
    /** The watchdog's next renewal is a retry at once, after one whose connection died. */
    retriedAtOnce = false;
    /** Watched: reports the lease lost when the last one that counted ends; not watched but
     * tied to a session: lets the session go of it then. */
    expiry;
    /** When the lease the holder counts on ends, ms since the epoch. */
    leaseEnd = 0;
    released = false;
    constructor(writes, keys, owner, tokens, ttl, mode, watched, began, 
    /** Its writes name the client's session. */
    tied) {
        this.writes = writes;
        this.keys = keys;
        this.owner = owner;
        this.tokens = tokens;
        this.ttl = ttl;
        this.mode = mode;
        this.watched = watched;
        this.tied = tied;
        this.leaseEndsAt(began + countedLease(ttl));
        if (watched)
            this.schedule();
    }
    get signal() {
        if (!this.lost) {
            this.lost = new AbortController();
            if (this.lostWhy)
                this.lost.abort(this.lostWhy);
        }
        return this.lost.signal;
    }
    get token() {
        return Math.max(...this.tokens);
    }
    async renew(ttl = this.ttl) {
        for (let retries = 0;; retries++) {
            if (this.gone)
                return false;
            const sent = Date.now();
            const command = tiedCommand(this.keys.command('RENEW', this.owner, String(ttl)), this.tied);
            let renewed;
            try {
                renewed = await this.counted(sent, ttl, this.writes.renew(command, (reply) => this.keys.whole(reply)));
            }
            catch (error) {
                // The server did not know the session (a failover): a new one replaces it.
                if (isNoSuchSession(error) && retries < SESSION_RETRIES)
                    continue;
                throw error;
            }
            if (!this.keys.whole(renewed.reply)) {
                this.lose();
                return false;
            }
            if (!this.tieTo(renewed.tie))
                return false;
            this.leaseEndsAt(sent + countedLease(ttl));
            return true;
        }
    }
    release() {
        return this.end(this.keys.command('RELEASE', this.owner));
    }
    async guard(...command) {
        if (this.keys.set)
            throw new Error('guard is not supported on a set of locks: LOCK.GUARD checks one lock');
        if (command.length === 0)
            throw new Error('guard needs a command to run');
        const guarded = ['LOCK.GUARD', this.keys.first, this.owner, 'TOKEN', String(this.token), this.writes.flag];
        return this.writes.command([...guarded, ...command.map(String)]);
    }
    fenced(fence, ...command) {
        const writes = this.writes.routedBy(this.writes.connection.prefix + fence);
        return fencedWith(writes, this.token, command);
    }
    /** Stops renewing and ends the holding with `command` (its `LOCK.RELEASE`, or an election's
     * `LOCK.RESIGN`): true if it was still held. */
    async end(command) {
        this.released = true;
        this.stop();
        this.untie();
        return this.keys.whole(await this.writes.connection.send(command, this.keys.first));
    }
    async reenter(ttl = this.ttl) {
        if (this.gone)
            return null;
        const sent = Date.now();
        const { tokens, tie } = await this.counted(sent, ttl, this.acquire('reenter', ttl, this.mode, true));
        if (tokens === null || !this.tieTo(tie))
            return null;
        this.leaseEndsAt(sent + countedLease(ttl));
        const inner = new Held(this.writes, this.keys, this.owner, tokens, ttl, this.mode, false, sent, this.tied);
        inner.tieTo(tie);
        return inner;
    }
    downgrade(ttl = this.ttl) {
        return this.changeMode(ttl, SHARED);
    }
    upgrade(ttl = this.ttl) {
        return this.changeMode(ttl, EXCLUSIVE);
    }
    /** The holding's mode becomes `mode`, with the token the grant gives, once the replicas have
     * it. Else it rejects: lost when the server released it, otherwise nothing changes here. */
    async changeMode(ttl, mode) {
        if (this.gone)
            return false;
        const sent = Date.now();
        const changing = this.acquire(mode === SHARED ? 'downgrade' : 'upgrade', ttl, mode, false);
        let grant;
        try {
            grant = await this.counted(sent, ttl, changing);
        }
        catch (error) {
            if (error instanceof NotReplicatedError && error.released)
                this.lose(`the lock was lost: ${error.message}`);
            throw error;
        }
        const { tokens, tie } = grant;
        if (tokens === null || !this.tieTo(tie))
            return false;
        this.mode = mode;
        this.tokens = tokens;
        this.leaseEndsAt(sent + countedLease(ttl));
        return true;
    }
    /** `LOCK.ACQUIRE` as this holding's owner for `what` (a single lock's), synced like a grant:
     * the token, or null when not granted. Rejects with {@link NotReplicatedError} when the
     * replicas lack it: the server released it (one hold of the owner's holding), or short of a
     * fixed count's `WAIT`, one more hold (`reentrant`) is given back here and a change of mode
     * stays made on the master. */
    async acquire(what, ttl, mode, reentrant) {
        if (this.keys.set)
            throw new Error(`${what} is not supported on a set of locks`);
        // Sent untied, it would untie the holding from its session on the server.
        const command = tiedCommand(acquireCommand(this.keys, this.owner, ttl, mode, reentrant), this.tied);
        return grantTokens(this.writes, command, reentrant ? this.keys.command('RELEASE', this.owner) : undefined);
    }
    /** `write`, sent at `sent` to reset the lease to `ttl` ms: when it does not count (not
     * acknowledged, no reply) the master made it (or may have), and a `ttl` shorter than what was
     * left shortened the lease there — so the lease the holder counts on is then at most that. */
    async counted(sent, ttl, write) {
        try {
            return await write;
        }
        catch (error) {
            const end = sent + countedLease(ttl);
            if (end < this.leaseEnd)
                this.leaseEndsAt(end);
            throw error;
        }
    }
    /** The lease, as far as the holder knows, now ends at `until` (ms since the epoch): a grant,
     * or a renewal that counted. Watched, the holding is lost then; not watched, its session lets
     * go of it then (a renewal ties it again). */
    leaseEndsAt(until) {
        this.leaseEnd = until;
        if (!(this.watched || this.tied) || this.released || this.lostWhy)
            return;
        clearTimeout(this.expiry);
        this.expiry = setTimeout(() => (this.watched ? this.lose() : this.untie()), until - Date.now());
        this.expiry.unref?.();
    }
    /** The watchdog's next renewal in `ms` (default: a third of the lease); it stops for good on
     * release and on loss. */
    schedule(ms = this.ttl / 3) {
        this.timer = setTimeout(() => void this.tick(), ms);
        this.timer.unref?.();
    }
    /**
     * One renewal of the watchdog. Counted: the next a third of the lease later. Refused because
     * the owner no longer holds the lock: lost, at once ({@link renew}). Not counted — the
     * replicas did not acknowledge it, or it failed (no reply, a dead connection, no connection): tried
     * again soon, and again, until one counts or the last lease that counted ends (the expiry
     * then reports the loss) — at once after a dead connection (it was closed: the next try goes
     * on a fresh one) unless the try that failed was such a retry already, otherwise after
     * {@link RENEW_RETRY_MS} (a third of the lease, when that is shorter).
     */
    async tick() {
        if (this.released)
            return;
        let next;
        try {
            if (!(await this.renew()))
                return;
        }
        catch (error) {
            next = error instanceof LostReply && !this.retriedAtOnce ? 0 : Math.min(RENEW_RETRY_MS, this.ttl / 3);
        }
        this.retriedAtOnce = next === 0;
        if (!this.released && !this.lostWhy)
            this.schedule(next);
    }
    /**
     * A write tied to the client's session `tie` (none: no session) counted: the holding is tied
     * to it from now on. False, and the holding lost, when its deadline passed before the reply
     * came — or when the holding was lost with an earlier session. A session already replaced by
     * a newer one: tied to the newer one too, in the background.
     */
    tieTo(tie) {
        if (this.gone)
            return false;
        if (!tie || tie === this.tie)
            return true;
        if (!tie.alive) {
            this.sessionLost(`its session's grace (${tie.grace} ms) passed before the reply came: the server may have released the lock`);
            return false;
        }
        this.untie();
        this.tie = tie;
        tie.tie(this);
        if (tie.over)
            void this.retie(tie);
        return true;
    }
    /** Its session may have ended: lost, for good. */
    sessionLost(why) {
        this.gone = true;
        this.tie = undefined;
        this.lose(`the lock was lost: ${why}`);
    }
    /** Its session `from` was replaced: a renewal to the lease it has left ties the holding to
     * the new one — tried again until it counts, is refused (lost), no lease is left, or `from`'s
     * deadline passes (lost with it). */
    async retie(from) {
        while (this.tie === from && !from.expired && !this.released && !this.lostWhy) {
            try {
                await this.renewLeft();
                return;
            }
            catch {
                await sleep(RETIE_RETRY_MS);
            }
        }
    }
    /** A renewal tied to the client's current session, to the lease the holding has left (never
     * longer: tying it to a session is no reason to extend it): true when renewed, false when
     * refused (lost) or no lease is left. Rejects as {@link renew}. */
    async renewLeft() {
        const left = Math.floor(this.leaseEnd - Date.now());
        return left >= 1 && this.renew(left);
    }
    untie() {
        this.tie?.holdings.delete(this);
        this.tie = undefined;
    }
    stop() {
        clearTimeout(this.timer);
        clearTimeout(this.expiry);
    }
    /** Lost: its signal aborts with `why`, and it is renewed no more. */
    lose(why = 'the lock lease was lost') {
        this.stop();
        this.untie();
        if (this.lostWhy)
            return;
        this.lostWhy = new Error(why);
        this.lost?.abort(this.lostWhy);
    }
}
/** A term of an election: a held lock (its holding renews it, and is lost first) whose token
 * is the epoch, ended by `LOCK.RESIGN`. */
class Led {
    held;
    writes;
    key;
    value;
    resigned = false;
    constructor(held, writes, 
    /** The election's key, as sent. */
    key, value) {
        this.held = held;
        this.writes = writes;
        this.key = key;
        this.value = value;
    }
    get epoch() {
        return this.held.token;
    }
    get candidate() {
        return this.held.owner;
    }
    get signal() {
        return this.held.signal;
    }
    async proclaim(value) {
        if (this.resigned || this.held.signal.aborted)
            return false;
        const proclaimed = (reply) => Number(reply) === 1;
        const { reply } = await this.writes.renew(['LOCK.PROCLAIM', this.key, String(this.epoch), value], proclaimed);
        if (!proclaimed(reply)) {
            this.held.lose(`the leadership was lost: term ${this.epoch} no longer leads (LOCK.PROCLAIM replied ${String(reply)})`);
            return false;
        }
        this.value = value;
        return true;
    }
    resign() {
        this.resigned = true;
        return this.held.end(['LOCK.RESIGN', this.key, String(this.epoch)]);
    }
}
/** A grant's tokens: `LOCK.ACQUIRE`'s one, or `LOCK.MACQUIRE`'s array, one per key; null when
 * busy. */
function tokensOf(reply) {
    if (reply === null || reply === undefined)
        return null;
    return Array.isArray(reply) ? reply.map(Number) : [Number(reply)];
}
/** A grant without waiting, synced ({@link Writes.grant}; `release` gives it back when a fixed
 * count's `WAIT` falls short, or a batch's `LOCK.SYNC` was refused: `batched`): the tokens, or
 * null when busy (or when the server cannot issue a token yet: `TRYAGAIN`), and its session. */
async function grantTokens(writes, command, release, batched = false) {
    try {
        const { reply, tie } = await writes.grant(command, release, batched);
        return { tokens: tokensOf(reply), tie };
    }
    catch (error) {
        if (isTryAgain(error))
            return { tokens: null };
        throw error;
    }
}
function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}
