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
import { Client } from './connection.js';
import { LeaderState, ObserveOptions } from './election.js';
import { SyncOptions } from './sync.js';
export type { Client, IORedisClient, NodeRedisClient, NodeRedisDuplicate, PoolSizes } from './connection.js';
export { LostReply, PoolClosed, setPoolSizes, setSessionOptions } from './connection.js';
export type { LeaderState, ObserveOptions } from './election.js';
export type { SessionOptions } from './session.js';
export type { SyncOptions } from './sync.js';
export { NotHeldError, NotReplicatedError, StaleTokenError } from './sync.js';
/** How a lock is taken and kept. */
export interface LockOptions {
    /** The lease, ms (default 30 000). */
    ttl?: number;
    /** One owner for every acquire (1 to 256 bytes) instead of a new random UUID each time: for
     * holders in several processes that must count as one. The hazard: every call that uses this
     * owner is then the holder too, so they no longer exclude each other. (With sessions, the
     * holding is tied to the session of whichever process acquired or renewed it last: when that
     * one dies, the server releases it for all of them — turn `session` off for such a lock.) */
    owner?: string;
    /** With a fixed `owner`, each acquire by it counts one more hold (`REENTRANT`). Without one,
     * a holder re-enters with `holding.reenter()`. */
    reentrant?: boolean;
    /**
     * Renew the lease every third of it until release (always on in `using`). A renewal that did
     * not count — the replicas did not acknowledge it (`sync`), no reply came, its connection died,
     * no connection could be had — is tried again soon: at once on a new connection after a dead
     * one, otherwise 500 ms later, or a third of the lease when that is shorter (each synced try
     * already waits up to the sync timeout), again and again, until one counts or the lease that last counted (less the drift allowance) ends:
     * then the holding is lost and its `signal` aborts. A renewal refused because this owner no
     * longer holds the lock loses the holding at once.
     */
    watchdog?: boolean;
    /**
     * Tie this lock's holdings to the client's session (default true, unless turned off for the
     * client with {@link setSessionOptions}): when this program dies — killed, crashed, cut off
     * — the server releases them a grace after its session connection closed (3 s by default)
     * and hands them to the next waiter, instead of after the lease. The holder learns first: a
     * holding counts only while its session does — until a grace, less the drift allowance,
     * after the last heartbeat the server answered — and its `signal` aborts when that passes,
     * before the server can hand the lock over. False: the holding ends with its lease only (a
     * lease meant to outlive the program).
     */
    session?: boolean;
    /** How long after a reply should have come (a wait's end, the sync timeout) the client gives
     * up on it — closing its connection, which makes the server release a grant it still held for
     * it — and asks for itself, ms (default 1 000). */
    timeoutMargin?: number;
    /**
     * How grants and renewals reach the master's replicas before they count (default: every
     * replica of the master's in-sync set — the write goes with `SYNC` (an acquire without
     * waiting and a renewal: with `NOSYNC`, in a batch with those sent at the same time, then
     * `LOCK.SYNC`), and the server replies once they all acknowledged it, within its
     * `lock.sync-timeout-ms`; `false`: not at all,
     * `NOSYNC`). Needs lock module 0.7.0 or later (an older one answers `ERR syntax error`: the
     * write rejects with an error that says so). When one does not count — not every member
     * acknowledged in time, the set has fewer than `lock.min-insync-replicas` members, or the
     * server is no longer a master — the server answers `NOREPLICAS` and the write rejects with
     * {@link NotReplicatedError} (its `reason` says which). A grant refused is also released
     * (`released`; by the server, or by the client for an acquire synced in a batch): an acquire rejects with it (or with a `wait` budget left, tries
     * again within it); a holding's `reenter` rejects, the new hold given back and the holding
     * left as it was; a `downgrade` or `upgrade` rejects and the holding is lost. A master that
     * became a replica meanwhile released nothing — the new master may have the grant: an
     * acquire's is released in the background (owner-checked) and a `wait` budget left is tried
     * with a new owner (with a fixed `owner`, it rejects); a re-entry's hold ends with the lease,
     * and a `downgrade` or `upgrade` leaves the holding as it was. A renewal rejects with it and
     * does not count (the lease the holding believes stays the last one that counted — or, when
     * its ttl is shorter than what was left, ends that ttl after it was sent, since the master
     * made it; a watched holding tries again within a second, and aborts its `signal` when that
     * lease ends first). Releases never wait.
     *
     * With a fixed `replicas` count the write goes with `NOSYNC` and the client sends `WAIT n`
     * behind it: a grant too few replicas acknowledged is released by the client (a `downgrade`
     * or `upgrade` stays made on the master, the holding keeping its mode, token and lease).
     *
     * While a member of the set is down, every grant and renewal fails after the sync timeout
     * until the master drops it from the set (with the module's defaults about 25 s after it
     * died); then they count again while the set keeps `lock.min-insync-replicas` members. A
     * watched holding keeps its lock when the drop comes before its last synced lease ends (its
     * watchdog's next try counts), and is lost otherwise.
     */
    sync?: SyncOptions | false;
}
/** How long to wait for a busy lock. */
export interface WaitOptions {
    /** ms; omitted: as long as it takes. */
    wait?: number;
}
/** A held lock, or a held set of locks ({@link createMultiLock}). */
export interface Holding {
    /** The fencing token: larger than every earlier holding's. Send it with every write. (An
     * upgrade gives the holding a new one.) For a set, the largest of its tokens: the one its
     * newly taken keys share. */
    readonly token: number;
    /** The fencing tokens, one per key: for a set in the order of its names (a key the owner
     * held before keeps its older token); otherwise `[token]`. */
    readonly tokens: readonly number[];
    /** The owner of this holding: new for each acquire, unless the lock was given one. */
    readonly owner: string;
    /** Aborted when the lease is known lost: a renewal was refused, (with the watchdog) the last
     * lease that counted ran out while renewals failed or were not synced, or its session may
     * have ended — no heartbeat answered for the session's grace, or the client was closed
     * (which releases it). Never aborted by a release. */
    readonly signal: AbortSignal;
    /** Resets the lease to `ttl` ms (default: the lock's), tied to the client's current session.
     * False when it was lost (and then `signal` aborts); a lost lock is never taken back — nor
     * one lost with its session, which is not even asked for. Synced like a grant: rejects with
     * {@link NotReplicatedError} (`write: 'renewal'`) when the master renewed it but the replicas
     * did not have it in time — it does not count, the holding's lease stays the last one that
     * counted — and with {@link LostReply} when the reply did not come. */
    renew(ttl?: number): Promise<boolean>;
    /** Stops renewing and releases. True if it was still held. */
    release(): Promise<boolean>;
    /**
     * Runs one Redis command — `holding.guard('DECRBY', 'stock:42', 1)` — only while this holding
     * holds the lock, with its fencing token (`LOCK.GUARD key owner TOKEN token SYNC command ...`;
     * not for a set): the server checks and runs it in one step, so a holder whose lease ended, or
     * whose lock was lost and taken again (by anyone, its own owner too), changes nothing.
     * Resolves to the command's reply, as the library gives a module command's. Synced like a
     * renewal (`sync`): by default on a connection of the sync pool, the reply held by the server
     * until the in-sync replicas have the write (a command that does not write replies at once).
     * In Redis Cluster the command's keys must be in the lock's slot (hash tags); ioredis's
     * `keyPrefix` is not applied to them (name them in full).
     *
     * Rejects with {@link NotHeldError} when the server refused it — the lock is free, held by
     * another owner, or held with another token: the command did not run; with {@link
     * NotReplicatedError} (`write: 'command'`) when it ran on the master but the replicas did not
     * have it in time (a failover may lose its write); with the command's own error; with {@link
     * LostReply} when no reply came.
     */
    guard(...command: Array<string | number>): Promise<unknown>;
    /**
     * Runs one Redis command through the fence `fence` with this holding's fencing token (a set's
     * largest), as {@link fenced} does: only when no larger token ran a command through it before,
     * and the fence then keeps this token. Synced as {@link guard} is. Rejects with {@link
     * StaleTokenError} when a larger token wrote first (the command did not run), and as {@link
     * guard} does otherwise.
     */
    fenced(fence: string, ...command: Array<string | number>): Promise<unknown>;
    /**
     * One more hold of this holding (`REENTRANT`; not for a set): same owner, token and mode, as
     * a holding of its own whose release gives that hold back — the lock is free once every hold
     * is. The lease (the owner's, shared by its holds) is reset to `ttl` ms (default: the lock's),
     * and this holding's lease with it. `null` when this owner no longer holds the lock. It does
     * not renew by itself: this holding's watchdog, if on, keeps the lease.
     *
     * Synced like a grant: rejects with {@link NotReplicatedError} (`write: 'grant'`) when the
     * master added the hold but the replicas did not have it in time — the hold is then given
     * back (by the server, or with a fixed `replicas` count by one owner-checked release; from a
     * master that became a replica meanwhile, a hold the new master may have ends with the lease)
     * and this holding's lease stays the last one that counted — and with {@link LostReply} when
     * the reply did not come (its connection is closed: a hold the server still held for it is
     * given back; one it replied already ends with the lease).
     */
    reenter(ttl?: number): Promise<Holding | null>;
    /**
     * A writer's holding becomes a reader's (same owner and token), letting other readers in; the
     * lease is reset to `ttl` ms (default: the lock's). False when this owner no longer holds the
     * lock.
     *
     * Synced like a grant: rejects with {@link NotReplicatedError} (`write: 'grant'`) when the
     * master made the change but the replicas did not have it in time: the server released the
     * holding (`released`), which is then lost (its `signal` aborts). With a fixed `replicas`
     * count (or from a master that became a replica meanwhile: `released` false) the change
     * stays made on the master instead — a failover may undo it, so the holding
     * keeps its mode and its last lease that counted, while the master may already let readers
     * in: write no more, and downgrade again or release. Rejects with {@link LostReply} when the
     * reply did not come (its connection is closed: the server releases the holding if it still
     * held the reply).
     */
    downgrade(ttl?: number): Promise<boolean>;
    /**
     * The only reader's holding becomes a writer's (same owner) with a new token, since exclusive
     * writing starts now; the lease is reset to `ttl` ms (default: the lock's). False, the
     * reader's holding kept, while others read too; false also when no longer held.
     *
     * Synced like a grant: rejects with {@link NotReplicatedError} (`write: 'grant'`) when the
     * master made the change but the replicas did not have it in time: the server released the
     * holding (`released`), which is then lost (its `signal` aborts). With a fixed `replicas`
     * count (or from a master that became a replica meanwhile: `released` false) the change
     * stays made on the master instead — a failover may lose it and let another
     * writer in, so it does not count: the holding stays a reader's, with its old token and its
     * last lease that counted (write nothing; upgrade again once the replicas are back, or
     * release). Rejects with {@link LostReply} when the reply did not come (its connection is
     * closed: the server releases the holding if it still held the reply).
     */
    upgrade(ttl?: number): Promise<boolean>;
}
/** A lock (exclusive, a reader, or a semaphore permit), or a set of locks taken together.
 * Every acquire is a new owner, unless one was fixed with the `owner` option. */
export interface Lock {
    /** The key (a set's first). */
    readonly name: string;
    /** The keys: a set's, or the one key. */
    readonly names: readonly string[];
    /** The owner every acquire uses, if one was fixed; `undefined`: a new one per acquire
     * (`holding.owner` tells it). */
    readonly owner: string | undefined;
    /** Takes it now, or `null` when busy. */
    tryAcquire(): Promise<Holding | null>;
    /** Takes it, waiting up to `wait` ms (`null` when still busy), or as long as it takes. */
    acquire(options?: WaitOptions): Promise<Holding | null>;
    /**
     * Takes it (waiting as `acquire`), runs `routine` with a signal that aborts if the lease is
     * lost, renews the lease meanwhile, and releases when `routine` ends, however it ends.
     * Rejects when the lock stayed busy.
     */
    using<T>(routine: (signal: AbortSignal, holding: Holding) => Promise<T>, options?: WaitOptions): Promise<T>;
}
/** How an election is campaigned for, and a term kept: as a lock's ({@link LockOptions}), the
 * candidate standing for its owner. A term is always watched (renewed every third of its lease
 * until it is resigned or lost). */
export interface ElectionOptions extends Pick<LockOptions, 'ttl' | 'session' | 'sync' | 'timeoutMargin'> {
    /**
     * One candidate id for every campaign (1 to 256 bytes: the host's name, say) instead of a new
     * random UUID each time — what `LOCK.LEADER` and observers see as `leader`. The hazard is the
     * lock's `owner`'s: a candidate that campaigns while it leads keeps its term (the same epoch,
     * with the new value and lease), so two campaigns with it, in one process or several, both
     * lead, and do not exclude each other.
     */
    candidate?: string;
}
/** A term of an election, held by its leader: kept (renewed) until it is resigned or lost. */
export interface Leadership {
    /** The term's epoch: its fencing token, larger than every earlier term's (and every earlier
     * token of the key). Send it with every write the leader makes. */
    readonly epoch: number;
    /** Who leads: the candidate that campaigned. */
    readonly candidate: string;
    /** What the leader proclaims: the campaign's value, or the last one `proclaim()` set. */
    readonly value: string;
    /** Aborted when the term is known lost, before another candidate can be elected — as a
     * holding's `signal` ({@link Holding.signal}): a renewal or a proclaim refused, the last
     * lease that counted ran out while renewals failed, or its session may have ended. Never
     * aborted by `resign()`. */
    readonly signal: AbortSignal;
    /**
     * The leader proclaims `value` from now on (`LOCK.PROCLAIM key epoch value`; its epoch and
     * lease stay): true when set; false when this term no longer leads — a successor's value is
     * never overwritten — and then the leadership is lost (its `signal` aborts); false without
     * asking once lost or resigned. It is synced as a renewal is (`SYNC`, or `NOSYNC` and `WAIT n`
     * for a fixed `replicas` count, or `NOSYNC` alone with syncing off). Rejects with {@link NotReplicatedError} (`write: 'renewal'`) when the
     * replicas did not have it in time: the value is set on the master, where a failover may lose
     * it, and `value` stays the one before; with {@link LostReply} when no reply came.
     */
    proclaim(value: string): Promise<boolean>;
    /** Ends the term (`LOCK.RESIGN key epoch`) and stops renewing it: the first waiting candidate
     * leads at once, with a larger epoch. True when this term still led; false when it had ended
     * (another term, or nobody, leads: nothing is changed). */
    resign(): Promise<boolean>;
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
export declare function fenced(client: Client, fence: string, token: number, ...command: Array<string | number>): Promise<unknown>;
/** An exclusive lock named `name`. */
export declare function createLock(client: Client, name: string, options?: LockOptions): Lock;
/**
 * Several locks taken together, exclusively, all or none (`LOCK.MACQUIRE`): a waiting set is
 * granted all its keys in one step, in one arrival order with every other waiter of any of
 * them, so sets asked for in any key order never deadlock, and nobody holds part of a set while
 * waiting for the rest. The holding has every token (`tokens`); its watchdog renews all the
 * leases together (`LOCK.MRENEW`, all or none: a set with one lease run out is lost), and
 * release frees them all (`LOCK.MRELEASE`). In Redis Cluster the keys must share a slot (hash
 * tags: `{order:42}:payment`). Re-entering, downgrading and upgrading are for single locks.
 */
export declare function createMultiLock(client: Client, names: readonly string[], options?: LockOptions): Lock;
/** A read-write lock: many readers or one writer, fair between them. Every acquire on either
 * side is a new owner; a writer downgrades to a reader, and the only reader upgrades, through
 * its holding. */
export declare function createReadWriteLock(client: Client, name: string, options?: LockOptions): {
    read: Lock;
    write: Lock;
};
/** A semaphore: at most `permits` holders, each acquire a new permit with its own owner. */
export declare function createSemaphore(client: Client, name: string, permits: number, options?: LockOptions): Lock;
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
export declare class Election {
    private readonly options;
    /** The election's key (without ioredis's `keyPrefix`). */
    readonly name: string;
    private readonly connection;
    /** The key as sent: with ioredis's `keyPrefix`. */
    private readonly key;
    private readonly writes;
    constructor(client: Client, name: string, options?: ElectionOptions);
    /** The candidate every campaign uses, if one was fixed; `undefined`: a new one per campaign
     * (`leadership.candidate` tells it). */
    get candidate(): string | undefined;
    /**
     * Campaigns to lead, proclaiming `value` (0 to 65 536 bytes; `LOCK.CAMPAIGN key candidate
     * value ttl [WAIT ms]`): resolves to the leadership once this candidate leads — at once, or
     * after the candidates that campaigned before it, in arrival order — waiting up to `wait` ms
     * (`null` when another still leads then; `wait: 0`: no waiting), or as long as it takes. Waits
     * and retries exactly as a lock's `acquire` ({@link Lock.acquire}): the same pools, sessions,
     * synced grants and lost-reply recovery.
     */
    campaign(value: string, options?: WaitOptions): Promise<Leadership | null>;
    /** Who leads now (`LOCK.LEADER`), over the client's own connection; nobody: `leader` null,
     * `epoch` 0. Any exclusive lock's holder counts as a leader, with an empty value. */
    leader(): Promise<LeaderState>;
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
    observe(options?: ObserveOptions): AsyncGenerator<LeaderState, void, undefined>;
}
/** An election named `name` ({@link Election}): `new Election(client, name, options)`. */
export declare function createElection(client: Client, name: string, options?: ElectionOptions): Election;
