/**
 * Group commit: the synced writes queued for one master at the same time go together, on one
 * connection of the sync pool, behind one held reply.
 *
 * A write with `SYNC` has the server hold its reply — and with it its connection — until the
 * master's in-sync replica set has the write: a connection, and a blocked client in the server,
 * per write in flight, each sent and read on its own. Instead, the writes queued for a master
 * go out as one pipeline on one connection, each with `NOSYNC`, then `LOCK.SYNC` (lock module
 * 0.7.0 and later), which the server answers once the set has every write before it: `OK`, and
 * every write counts; an error, and none does — the server undid nothing, so {@link Writes}
 * gives back the grants (writes.ts).
 *
 * Whoever gets a connection of the sync pool sends everything queued (at most {@link MAX}
 * writes), then what was queued meanwhile on the same connection, until nothing is: under load
 * the batches grow by themselves. A lone write goes alone with `SYNC`, as before batching —
 * `LOCK.SYNC` behind it would cost one task a tenth more time and save nothing — its own reply
 * saying whether it counts (a grant the server refused, or whose connection closed first, it
 * released itself).
 * Writes queue as long as they would have for a connection of their own (their `deadline`):
 * then they reject with {@link Exhausted}, nothing sent.
 */
import { Session } from './session.js';
/** The most writes in one batch. */
export declare const MAX = 64;
/** A write's reply in its batch (an error reply as an `Error` value), `LOCK.SYNC`'s reply to
 * the batch (`OK`, or an `Error` value: none of the batch counts; `OK` for a lone write, sent
 * with `SYNC`: its own reply says), when the batch was sent (ms since the epoch), and the
 * session the connection was bound to for it. */
export interface Committed {
    reply: unknown;
    synced: unknown;
    sent: number;
    tie: Session | undefined;
}
/** A lent connection of the sync pool, as a batch uses it (`Own` in connection.ts). */
export interface Sender {
    readonly tie: Session | undefined;
    /** Sends `commands` as one pipeline; their replies, an error reply as an `Error` value.
     * Rejects when not every reply came within `timeoutMs` (the connection is then closed). */
    pipeline(commands: string[][], timeoutMs: number | undefined): Promise<{
        replies: unknown[];
    }>;
}
/** Lends `use` a connection of the sync pool, queued for until `deadline` (ms since the epoch),
 * and takes it back when `use` settles: `Connection`'s lend, for one master. */
export type Lend = (deadline: number, use: (own: Sender) => Promise<void>) => Promise<void>;
/** `commands` (lock writes without their flag), each with `NOSYNC`, then `LOCK.SYNC`, in one
 * pipeline on `own` — a lone one with `SYNC` — : each one's reply with `LOCK.SYNC`'s. Rejects
 * as {@link Sender.pipeline}. */
export declare function commit(own: Sender, commands: string[][], timeoutMs: number): Promise<Committed[]>;
/** The writes queued for one master (those tied to the client's session, or those not: a
 * connection's binding ties every acquire and renewal on it alike). */
export declare class Batcher {
    private readonly lend;
    private readonly queue;
    /** Senders waiting for a connection: each will send up to {@link MAX} of the queue. */
    private waiting;
    private scheduled;
    constructor(lend: Lend);
    /** Sends `command` (a lock write without its flag) in the next batch, queued until
     * `deadline`, its batch's replies waited for up to `timeoutMs`. Rejects with {@link
     * Exhausted} when no connection came free before `deadline` (nothing was sent), with the
     * batch's `LostReply`, and with why no connection could be had (a connect error, the
     * session's, the pool closed). */
    add(command: string[], deadline: number, timeoutMs: number): Promise<Committed>;
    /** Senders for the writes queued beyond what those waiting for a connection will take. */
    private start;
    /** Borrows a connection, and sends batches on it while writes are queued. */
    private send;
    /** The next batch: the first {@link MAX} writes queued. */
    private take;
    private commit;
    /** No connection was lent: at its deadline, the writes whose deadline came reject with
     * {@link Exhausted}; otherwise every write queued rejects with why. */
    private fail;
}
