/**
 * Sessions: a client's holdings tied to a connection it keeps open, so that when the program
 * dies (kill -9, a crash, a lost network) the server releases them a grace after that
 * connection closed — and hands them to the next waiter — instead of after their leases.
 *
 * One session per client per master ({@link SessionKeeper}), opened on the first acquire on a
 * dedicated connection no pool lends out (named `leasehold-session`, `CLIENT NO-EVICT on`), and
 * kept attached by a heartbeat (`LOCK.SESSION ATTACH id` every third of the grace) that
 * reconnects it when it dropped. Acquires and renewals go over pooled connections bound to it
 * (`LOCK.SESSION USE id`, once per connection and session, in the pipeline of the first write
 * that needs it: {@link binding}), so they carry no `SESSION id`.
 *
 * **The holder learns first.** A reply to `LOCK.SESSION ATTACH` (or `OPEN`) sent at `t` means
 * the session was attached at some moment after `t`, so the server cannot end it before
 * `t + grace`. The client counts the session alive until `t + grace` less the drift allowance
 * of a lease ({@link countedLease}) after the last such confirmed send, and when that passes
 * without a newer one every holding tied to it is lost — its `signal` aborts — before the
 * server can hand any of them over. Nothing here waits to notice a dropped socket.
 *
 * When the server no longer knows the session (`ERR no such session`: a failover or restart —
 * a new master has no sessions — or the session ended; a connection still bound to it gets it
 * for every acquire and renewal), a new one is opened and every holding still counted alive is
 * renewed on a connection bound to the new one: renewed, it is tied to the new session;
 * refused, it is lost. A holding whose session's deadline passed is never taken back.
 */
import { Dedicated } from './pool.js';
/** How a client's holdings are tied to a session ({@link setSessionOptions}). */
export interface SessionOptions {
    /** Tie holdings to a session, so that the server releases them a grace after this program's
     * session connection closed (default true). False: holdings end with their leases only, as
     * before sessions. */
    enabled?: boolean;
    /** How long after the session connection closed the server ends the session, ms (100 to the
     * module's `lock.session-max-grace-ms`, 60 000 by default; default: the server's
     * `lock.session-grace-ms`, 3 000 by default). A shorter grace hands a crashed holder's locks
     * on sooner; a longer one rides out longer network blips. Read when a session opens. */
    grace?: number;
}
/** The last element of a command to be tied to the client's session on the master it is sent
 * to: dropped on a connection bound to that session, `SESSION id` on any other ({@link
 * binding}). */
export declare const SESSION = "SESSION";
/** Whether `command` asks to be tied to the session ({@link SESSION}). */
export declare function wantsSession(command: readonly string[]): boolean;
/** A lock write with `flag` (`SYNC`, `NOSYNC`) last, before the {@link SESSION} marker if it
 * ends in one. */
export declare function flagged(command: readonly string[], flag: string): string[];
/** Whether a connection's binding ties `command` (an acquire, a campaign or a renewal) to its
 * session. */
export declare function tiedByUse(command: readonly string[]): boolean;
/** Commands as they go out on a pooled connection, and the binding to put before them. */
export interface Binding {
    /** The commands as sent, in the order given. */
    commands: string[][];
    /** `LOCK.SESSION USE id` (or `USE NONE`) to send first, in the same pipeline, when the
     * connection's binding must change; none when it is right already. */
    use?: string[];
    /** The id of the session the connection is bound to once `use` replied `OK` (undefined:
     * none). */
    to: string | undefined;
}
/**
 * How `commands` go out on a pooled connection bound to the session with id `bound` (undefined:
 * none; as that connection's `OK` replies to `LOCK.SESSION USE` told) so that each is tied as
 * it asks: those ending in {@link SESSION} to `session` (none: untied, sessions being off),
 * the others to none.
 *
 * - Tied, on a connection bound to `session`: the marker is dropped; the binding ties them.
 * - Tied, on any other connection: `LOCK.SESSION USE id` goes first, and the commands name the
 *   session as well (`SESSION id`, which wins over any binding). If `USE` is refused (`ERR no
 *   such session`: the session ended), so are they, and they change nothing: never run untied
 *   on a connection never bound, nor tied to the older session one was bound to.
 * - Untied acquires and renewals, on a bound connection: `LOCK.SESSION USE NONE` goes first.
 *
 * Throws when tied and untied acquires or renewals are mixed (one binding ties them all).
 */
export declare function binding(commands: readonly string[][], session: Session | undefined, bound: string | undefined): Binding;
/** `ERR no such session`: the server does not know the session (never opened there — a new
 * master after a failover — or ended). */
export declare function isNoSuchSession(error: unknown): boolean;
/**
 * How long a lease (or a session's grace) of `ms` counts for its holder, from when it began:
 * `ms` less a clock drift allowance of 1% and 2 ms, the drift factor of the Redlock algorithm
 * (the server's clock may run a little fast, and a grant handed over after a wait was made a
 * little before its reply came).
 */
export declare function countedLease(ms: number): number;
/** A holding tied to a session, as the session sees it. */
export interface Tied {
    /** The session may have ended: the holding is lost for good (its signal aborts); `why` says
     * why. */
    sessionLost(why: string): void;
    /** The session was replaced by a new one: tie the holding to it (a renewal tied to it) while
     * `from`'s deadline has not passed; refused, the holding is lost. */
    retie(from: Session): Promise<void>;
}
/** One session on the server: its id, its grace, and until when this client counts it alive. */
export declare class Session {
    readonly keeper: SessionKeeper;
    readonly id: string;
    readonly grace: number;
    /** The holdings tied to it, as far as this client knows. */
    readonly holdings: Set<Tied>;
    /** Replaced by a newer session, expired or closed: no holding is tied to it from now on. */
    over: boolean;
    /** Its deadline passed (or the client was closed): its holdings are lost. */
    expired: boolean;
    /** When this client stops counting on it, ms of {@link now}. */
    private deadline;
    private timer;
    /** `sent`: when the `LOCK.SESSION OPEN` that opened it was sent, ms of {@link now}. */
    constructor(keeper: SessionKeeper, id: string, grace: number, sent: number);
    /** Whether its deadline has not passed. */
    get alive(): boolean;
    /** An attach sent at `sent` (ms of {@link now}) was answered: the server cannot end the
     * session before `sent + grace`. */
    confirm(sent: number): void;
    /** Ties `holding` to this session (leaving the one it was tied to). */
    tie(holding: Tied): void;
    /** Its deadline passed: every holding tied to it is lost, now, before the server can hand
     * one over. */
    expire(why: string): void;
    /** The deadline's timer, set again when it moves. */
    private arm;
}
/**
 * Keeps one session open on one master for a client: opened on demand ({@link current}) on a
 * connection of its own, attached by a heartbeat every third of the grace (reconnecting), and
 * replaced when the server no longer knows it.
 */
export declare class SessionKeeper {
    open: () => Promise<Dedicated>;
    private readonly grace;
    /** The session connection, and whether it still needs its name and `NO-EVICT`. */
    private link;
    private linking;
    /** The session in use; none before the first acquire, and after one expired. */
    private session;
    private opening;
    private beat;
    private closed;
    /** `open`: a new dedicated connection to the master; `grace`: asked for, ms (undefined: the
     * server's). */
    constructor(open: () => Promise<Dedicated>, grace: number | undefined);
    /**
     * The session to tie holdings to: the one in use while its deadline has not passed, or a new
     * one (`LOCK.SESSION OPEN` on the session connection, connected first if need be). Rejects
     * when it cannot be opened (the connect error, `LostReply`, an error reply such as
     * `READONLY`), with {@link PoolClosed} once the client was closed.
     */
    current(): Promise<Session>;
    /** The server answered `ERR no such session` to a command tied to `session`: a new session
     * replaces it, and the holdings tied to it are tied to the new one while `session`'s deadline
     * lets them. */
    replaced(session: Session): void;
    /** `session`'s deadline passed with no newer attach answered: its holdings are lost, and it
     * is closed on the server if it still is open there (nothing of it counts any more). */
    expired(session: Session): void;
    /** The client was closed: `LOCK.SESSION CLOSE` releases every holding of the session at once
     * (they are lost: their signals abort), and the session connection is closed. */
    close(): Promise<void>;
    private openSession;
    /** The heartbeat in `ms`. */
    private schedule;
    /** `LOCK.SESSION ATTACH id` on the session connection (a new one if it dropped): answered,
     * the session's deadline moves to a grace after it was sent; `ERR no such session`, a new
     * session replaces it; no reply, or no connection, tried again soon. */
    private heartbeat;
    /** The session connection: the open one, or a new one. */
    private connection;
    /** Closes the session connection (the session stays attached to none until the next). */
    private drop;
    /**
     * `commands` on the session connection, after `CLIENT NO-EVICT on` and `CLIENT SETNAME
     * leasehold-session` on a new one (their errors ignored: older servers, ACLs): their replies,
     * an error reply as an `Error` value. Rejects when not every reply came within `timeoutMs`
     * or the connection failed, and closes it.
     */
    private request;
}
