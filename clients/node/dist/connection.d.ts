/**
 * How the locks talk to the server through the client the program already has — node-redis
 * (v4 and later) or ioredis — and how a wait gets a connection of its own.
 *
 * A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, so a wait never goes
 * over the program's connection: it goes over a duplicate, which is closed when the reply has
 * come — or when it has not come `margin` ms after the wait should have ended (ioredis's
 * `commandTimeout` would otherwise report a failure while the server still grants the lock).
 */
import { Learned } from './sync.js';
/** What the locks use of a node-redis client (`createClient()`, v4 and later). */
export interface NodeRedisClient {
    sendCommand(args: string[]): Promise<unknown>;
    duplicate(): NodeRedisDuplicate;
}
/** A node-redis duplicate, connected for one wait. */
export interface NodeRedisDuplicate {
    connect(): Promise<unknown>;
    sendCommand(args: string[]): Promise<unknown>;
    destroy?(): unknown;
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
/** What the locks use of an ioredis client (`new Redis()`). */
export interface IORedisClient {
    call(command: string, ...args: (string | number)[]): Promise<unknown>;
    duplicate(override?: Record<string, unknown>): IORedisClient;
    disconnect(): void;
    options: {
        keyPrefix?: string;
        host?: string;
        port?: number;
    };
}
/** What the locks use of an ioredis cluster client (`new Cluster()`). */
export interface IORedisCluster {
    isCluster: true;
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
/** The client as the locks use it: commands on a lock go to the master serving it (in a
 * cluster, the master of its slot). */
export declare class Connection {
    private readonly client;
    /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
    readonly prefix: string;
    constructor(client: Client);
    /** What was learned of the master serving `key`, shared by every lock on it. */
    learned(key: string): Learned;
    /** Sends a quick command on a lock over the program's own connection, routed in a cluster by
     * `key` (default `args[1]`, a single lock's key; a set's first key otherwise). */
    send(args: string[], key?: string): Promise<unknown>;
    /** Sends a keyless command (`INFO replication`) to the master serving `key`. */
    sendToMaster(key: string, args: string[]): Promise<unknown>;
    /**
     * Sends a command on `key` over a connection of its own to the master serving it, closed
     * afterwards — one that blocks in the server (a wait), or a grant to sync — and, when its
     * reply is not null and `then` is given, `then` on the same connection; resolves to both
     * replies. In a cluster it follows `MOVED` (relearning the slots) and `ASK` (to the
     * importing master). Rejects with {@link LostReply} when no reply came within `timeoutMs`
     * (`undefined`: no limit), or the connection failed: the server may have done it or not.
     */
    sendOwn(key: string, args: string[], timeoutMs: number | undefined, then?: string[]): Promise<[unknown, unknown]>;
    private sendOwnOnce;
    /** A connection of its own to the master serving `key`, or to the node at `address`. */
    private dedicated;
    /** `host:port` of the master serving `key`, as the cluster client knows it now. */
    private masterAddress;
    private ioredisNode;
    private nodeRedisNode;
    /** After `MOVED`: the cluster client learns where the slot of `key` went. */
    private relearnSlots;
}
/** A wait's reply did not come: the server may have granted the lock, or not. */
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
