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
/** What the locks use of an ioredis client (`new Redis()`). */
export interface IORedisClient {
    call(command: string, ...args: (string | number)[]): Promise<unknown>;
    duplicate(override?: Record<string, unknown>): IORedisClient;
    disconnect(): void;
    options: {
        keyPrefix?: string;
    };
}
/** A node-redis or ioredis client. */
export type Client = NodeRedisClient | IORedisClient;
/** The client as the locks use it. */
export declare class Connection {
    private readonly client;
    /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
    readonly prefix: string;
    constructor(client: Client);
    /** What was learned of the master behind this client, shared by every lock on it. */
    get learned(): Learned;
    /** Sends a quick command over the program's own connection. */
    send(args: string[]): Promise<unknown>;
    /**
     * Sends a command over a connection of its own, closed afterwards — one that blocks in the
     * server (a wait), or a grant to sync — and, when its reply is not null and `then` is given,
     * `then` on the same connection; resolves to both replies. Rejects with {@link LostReply}
     * when no reply came within `timeoutMs` (`undefined`: no limit), or the connection failed:
     * the server may have done it or not.
     */
    sendOwn(args: string[], timeoutMs: number | undefined, then?: string[]): Promise<[unknown, unknown]>;
    private dedicated;
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
