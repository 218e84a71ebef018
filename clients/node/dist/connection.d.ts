/**
 * How the locks talk to the server through the client the program already has — node-redis
 * (v4 and later) or ioredis — and the connections they borrow for themselves.
 *
 * Quick commands (a grant that is not synced, a release) go over the program's own connection.
 * A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, and so does a synced
 * write (`SYNC`: the server holds its reply until the replicas have it), so those go over
 * dedicated connections — duplicates of the program's client, without the client's command
 * timeout or retries — kept in two bounded pools per client (per master in a cluster, {@link
 * PoolSizes}): one for waits, one for synced writes, so that waiters never starve a holder's
 * renewal. The synced acquires and renewals queued for a master at the same time share one
 * connection of the sync pool, behind one `LOCK.SYNC` ({@link Connection.batched}, batch.ts). A connection is given back once every reply sent on it came, and closed when one
 * did not come `margin` ms after it should have (ioredis's `commandTimeout` would otherwise
 * report a failure while the server still grants the lock; closing it makes the server release
 * a grant it still held for it) or the connection failed. Closing the program's client closes
 * its pools (a connection lent to a wait once the wait ends).
 *
 * Each master's place also keeps the client's session there ({@link SessionKeeper}) on a
 * connection of its own; closing the program's client closes the session (`LOCK.SESSION
 * CLOSE`) and that connection. A pooled connection that carries tied writes is bound to the
 * session (`LOCK.SESSION USE id`) in the pipeline of the first of them, and again when the
 * session was replaced; one bound that carries untied writes is unbound first (`USE NONE`):
 * {@link binding}.
 */
import { Committed } from './batch.js';
import { Session, SessionOptions } from './session.js';
export { Exhausted, PoolClosed } from './pool.js';
/** What the locks use of a node-redis client (`createClient()`, v4 and later). */
export interface NodeRedisClient {
    sendCommand(args: string[]): Promise<unknown>;
    duplicate(overrides?: {
        socket?: object;
        commandOptions?: object;
    }): NodeRedisDuplicate;
    readonly options?: {
        socket?: object;
        commandOptions?: object;
    };
    on(event: 'end', listener: () => void): unknown;
}
/** A node-redis duplicate: a dedicated connection of a pool. */
export interface NodeRedisDuplicate {
    connect(): Promise<unknown>;
    sendCommand(args: string[]): Promise<unknown>;
    readonly isReady: boolean;
    on(event: 'error', listener: (error: Error) => void): unknown;
    /** Closes it at once (node-redis 5 and later; 5 throws `ClientClosedError` when it is closed
     * already). */
    destroy?(): unknown;
    /** Closes it (node-redis 4, which rejects with `ClientClosedError` when it is closed already). */
    disconnect?(): Promise<unknown>;
}
/** A node of a Redis Cluster as node-redis names it. */
export interface NodeRedisClusterNode {
    host: string;
    port: number;
}
/** What the locks use of a node-redis cluster client (`createCluster()`, v4 and later). */
export interface NodeRedisCluster {
    sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
    getSlotMaster(slot: number): NodeRedisClusterNode;
    getMasters(): NodeRedisClusterNode[];
    nodeClient(node: NodeRedisClusterNode): NodeRedisClient | Promise<NodeRedisClient>;
}
/** An ioredis pipeline (`redis.pipeline()`): commands sent together, not a transaction. */
export interface IORedisPipeline {
    call(command: string, ...args: (string | number)[]): unknown;
    exec(): Promise<[Error | null, unknown][] | null>;
}
/** What the locks use of an ioredis client (`new Redis()`). */
export interface IORedisClient {
    call(command: string, ...args: (string | number)[]): Promise<unknown>;
    duplicate(override?: Record<string, unknown>): IORedisClient;
    pipeline(): IORedisPipeline;
    connect(): Promise<void>;
    disconnect(): void;
    on(event: 'end' | 'error', listener: () => void): unknown;
    readonly status: string;
    options: {
        keyPrefix?: string;
        host?: string;
        port?: number;
    };
}
/** What the locks use of an ioredis cluster client (`new Cluster()`). */
export interface IORedisCluster {
    readonly isCluster: boolean;
    call(command: string, ...args: (string | number)[]): Promise<unknown>;
    slots: string[][];
    nodes(role?: 'all' | 'master' | 'slave'): IORedisClient[];
    refreshSlotsCache(callback?: (error?: Error | null) => void): void;
    options: {
        keyPrefix?: string;
    };
}
/** A node-redis or ioredis client, of one server or of a Redis Cluster. */
export type Client = NodeRedisClient | IORedisClient | NodeRedisCluster | IORedisCluster;
/** The most connections the locks of one client keep open to one master, per pool. */
export interface PoolSizes {
    /** For waits in the server (`acquire({ wait })`, `using`): each waiter holds one as long as
     * it waits (default 32). */
    wait?: number;
    /** For synced writes — a grant without waiting, a renewal — and for writes tied to a
     * session (default 16). */
    sync?: number;
}
/** Which pool a connection is borrowed from. */
export type PoolKind = keyof PoolSizes;
export declare const DEFAULT_POOL_SIZES: Required<PoolSizes>;
/** A pooled connection lent to one caller, to the master serving its key. */
export interface Own {
    /** The client's session on that master, when the caller asked for it ({@link
     * Connection.lend}): the one a command ending in `SESSION` is tied to. */
    readonly tie: Session | undefined;
    /**
     * Sends `commands` as one pipeline (never `MULTI`), and resolves to their replies in order,
     * an error reply as an `Error` value, with when each came (ms since the epoch). Acquires and
     * renewals ending in `SESSION` are tied to {@link tie} (none: untied), the others to none:
     * `LOCK.SESSION USE` goes first in the same pipeline when the connection's binding must
     * change ({@link binding}), and its reply is not among theirs. Rejects with {@link LostReply}
     * when not every reply came within `timeoutMs`, or the connection failed — or when `USE NONE`
     * was refused while an untied write behind it was done (it may have been tied to the session
     * the connection was bound to): the connection is then closed, not reused. Throws when tied
     * and untied acquires or renewals are mixed. When `signal` aborts first (a blocked `LOCK.OBSERVE`
     * given up on), rejects with its reason, and the connection is closed.
     */
    pipeline(commands: string[][], timeoutMs: number | undefined, signal?: AbortSignal): Promise<Replies>;
}
/** The replies of a pipeline, in order, and when each came (ms since the epoch). */
export interface Replies {
    replies: unknown[];
    arrived: number[];
}
/** The client as the locks use it: commands on a lock go to the master serving it (in a
 * cluster, the master of its slot). */
export declare class Connection {
    private readonly client;
    /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
    readonly prefix: string;
    constructor(client: Client);
    /** Sends a quick command on a lock over the program's own connection, routed in a cluster by
     * `key` (default `args[1]`, a single lock's key; a set's first key otherwise). */
    send(args: string[], key?: string): Promise<unknown>;
    /** Whether the locks of this client tie their holdings to a session ({@link
     * setSessionOptions}; default true). */
    get sessions(): boolean;
    /**
     * Lends `use` a connection of the `kind` pool to the master serving `key`, and takes it back
     * when `use` settles (closed if a reply was lost or it reached a replica). With `tied`, the
     * client's session on that master comes with it (`own.tie`; opened first if need be). In a
     * cluster it follows `MOVED` (relearning the slots) and `ASK` (to the importing master) that
     * `use` throws — each master with its own session. Rejects with {@link Exhausted} when no
     * connection came free before `deadline` (ms since the epoch; `undefined`: no limit), with
     * the connect error when a new one could not connect, and with why a session could not be
     * opened.
     */
    lend<T>(kind: PoolKind, key: string, deadline: number | undefined, use: (own: Own) => Promise<T>, tied?: boolean): Promise<T>;
    /**
     * Sends `command` (a grant or a renewal, without its flag) to the master serving `key` in the
     * next batch of the writes queued for it ({@link Batcher}: together on one connection of the
     * sync pool, `LOCK.SYNC` behind them), queued until `deadline` (ms since the epoch), the
     * batch's replies waited for up to `timeoutMs`: its reply and `LOCK.SYNC`'s. One ending in
     * `SESSION` is tied to the client's session on that master. In a cluster it follows `MOVED`
     * (relearning the slots) and `ASK` (alone, to the importing master). Rejects as {@link lend}.
     */
    batched(key: string, command: string[], deadline: number, timeoutMs: number): Promise<Committed>;
    private lendOnce;
    /** {@link lendOnce} on the master of `place` (`asking`: after `ASK`). */
    private lendFrom;
    /** The pools to the master at `address`, made on first use (and again when the cluster
     * client replaced its client for that node: the session stays, reconnecting through the new
     * one); closed, with the session, when that client closes. */
    private place;
    /** The client's session on the master of `place`, made (not yet opened) on first use. */
    private keeper;
    /** The client the master serving `key` (or the node at `address`) is reached through. */
    private origin;
    /** `host:port` of the master serving `key`, as the cluster client knows it now (`''` for
     * one server). */
    private masterAddress;
    private ioredisNode;
    private nodeRedisNode;
    /** After `MOVED`: the cluster client learns where the slot of `key` went. */
    private relearnSlots;
}
/** Sets the sizes of the pools the locks of `client` borrow connections from; pools already
 * open take the new sizes too (a smaller one closes connections as they come back). */
export declare function setPoolSizes(client: Client, sizes: PoolSizes): void;
/**
 * Sets how the locks of `client` tie their holdings to the client's session ({@link
 * SessionOptions}): `enabled` (default true) and the `grace` in ms (default: the server's). Set
 * it right after creating the client: `enabled` is read when a lock is created, `grace` when
 * the session opens (on the first acquire; per master in a cluster). Throws `RangeError` for a
 * grace that is not a whole number of at least 100 ms; the server refuses one above its
 * `lock.session-max-grace-ms` (60 000 by default) when the session opens, and the acquire
 * rejects with that error.
 */
export declare function setSessionOptions(client: Client, options: SessionOptions): void;
/** A reply did not come: the server may have done the command, or not. */
export declare class LostReply extends Error {
    name: string;
}
/**
 * An error reply of the server (`ERR ...`, `WRONGTYPE ...`, `TRYAGAIN ...`): its message starts
 * with the error code, in capitals. Connection failures (`Connection is closed.`, `read
 * ECONNRESET`, ...) do not.
 */
export declare function isServerError(error: unknown): boolean;
/** `TRYAGAIN`: the server could not issue a fencing token yet; a moment later it can. */
export declare function isTryAgain(error: unknown): boolean;
