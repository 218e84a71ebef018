/**
 * A bounded pool of dedicated connections to one server: lent to one caller at a time, given
 * back once every reply sent on it was read, closed instead when a reply was lost.
 *
 * Written here rather than taken from node-redis or npm because a lock needs three things none
 * of them offers together: a queue budget per caller (an acquire's own wait; node-redis's
 * `createClientPool` and `generic-pool` have one timeout for the whole pool), a way to throw a
 * connection away instead of returning it (`createClientPool` returns whatever its task used),
 * and a failed connect that rejects the caller (`generic-pool` retries it while its callers
 * wait on).
 */
/** A dedicated connection, as the pools (and the sessions) keep it. */
export interface Dedicated {
    /** Sends the commands together; each reply or error, a connection failure as an error too,
     * with when it came. */
    pipeline(commands: string[][]): Promise<Replied[]>;
    alive(): boolean;
    close(): void;
    /** The id of the session this connection is bound to (`LOCK.SESSION USE`), as the server's
     * `OK` told; undefined: none. */
    session?: string;
}
/** A command's reply (an error as an `Error` value) and when it came, ms since the epoch. */
export type Replied = [unknown, number];
/** How the pool makes, checks and closes a connection. */
export interface Factory<T> {
    /** A new connection, ready for commands; rejects when it cannot connect. */
    open(): Promise<T>;
    /** Whether it is still connected (a connection dropped while idle is not lent again). */
    alive(connection: T): boolean;
    close(connection: T): void;
}
/** No connection came free within the caller's budget. Nothing was sent. */
export declare class Exhausted extends Error {
    name: string;
}
/** The pool was closed (its client closed) while a caller queued for a connection. */
export declare class PoolClosed extends Error {
    name: string;
}
export declare class Pool<T> {
    private readonly factory;
    size: number;
    private readonly idle;
    /** Callers waiting for a connection, first come first served. */
    private readonly queue;
    /** Connections open or being opened, idle or lent. */
    private count;
    private closed;
    /** One timer for the whole queue, armed for the earliest deadline in it at the most: a
     * timer per queued caller cost a tenth of a synced grant's time when 64 tasks shared 16
     * connections. */
    private timer;
    /** When {@link timer} fires, ms since the epoch. */
    private timerAt;
    /** `size`: at most this many connections open at once. */
    constructor(factory: Factory<T>, size: number);
    /**
     * A connection: an idle one, a new one while fewer than `size` are open, or else the next
     * one given back or freed, queued until `deadline` (ms since the epoch; `undefined`: as long
     * as it takes). Rejects with {@link Exhausted} at the deadline, {@link PoolClosed} when the
     * pool closes first, or the connect error.
     */
    borrow(deadline?: number): Promise<T>;
    /** Sets the queue's timer to fire at `at` (ms since the epoch). */
    private arm;
    /** Stops the queue's timer once nobody queues. */
    private disarmIfIdle;
    /** Rejects the queued callers whose deadline came with {@link Exhausted}, and sets the timer
     * for the earliest deadline left. */
    private expire;
    /** Takes back a connection every reply of which was read: to the first queued caller, or
     * idle. */
    giveBack(connection: T): void;
    /** Closes a connection whose reply was lost (or that failed); a queued caller gets a new
     * one in its place. */
    discard(connection: T): void;
    /** Closes the idle connections now and lent ones when they come back; rejects the queued
     * callers. */
    close(): void;
    private open;
    private forget;
    /** Opens connections for queued callers while there is room. */
    private serveQueue;
}
