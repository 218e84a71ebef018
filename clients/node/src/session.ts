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

import { Dedicated, PoolClosed } from './pool.js';

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
export const SESSION = 'SESSION';

/** Whether `command` asks to be tied to the session ({@link SESSION}). */
export function wantsSession(command: readonly string[]): boolean {
  return command[command.length - 1] === SESSION;
}

/** A lock write with `flag` (`SYNC`, `NOSYNC`) last, before the {@link SESSION} marker if it
 * ends in one. */
export function flagged(command: readonly string[], flag: string): string[] {
  return wantsSession(command) ? [...command.slice(0, -1), flag, SESSION] : [...command, flag];
}

/** The commands a connection's binding (`LOCK.SESSION USE`) ties to its session when they name
 * none (a campaign is an acquire with a value). */
const TIED_BY_USE = new Set(['LOCK.ACQUIRE', 'LOCK.RENEW', 'LOCK.MACQUIRE', 'LOCK.MRENEW', 'LOCK.CAMPAIGN']);

/** Whether a connection's binding ties `command` (an acquire, a campaign or a renewal) to its
 * session. */
export function tiedByUse(command: readonly string[]): boolean {
  return TIED_BY_USE.has(command[0]);
}

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
export function binding(commands: readonly string[][], session: Session | undefined, bound: string | undefined): Binding {
  const bare = commands.map((command) => (wantsSession(command) ? command.slice(0, -1) : [...command]));
  if (session === undefined || !commands.some(wantsSession)) {
    if (bound === undefined || !bare.some(tiedByUse)) return { commands: bare, to: bound };
    return { commands: bare, use: ['LOCK.SESSION', 'USE', 'NONE'], to: undefined };
  }
  if (commands.some((command) => tiedByUse(command) && !wantsSession(command))) {
    throw new Error('tied and untied acquires or renewals in one pipeline');
  }
  if (bound === session.id) return { commands: bare, to: bound };
  return {
    commands: commands.map((command) => (wantsSession(command) ? [...command, session.id] : [...command])),
    use: ['LOCK.SESSION', 'USE', session.id],
    to: session.id,
  };
}

/** `ERR no such session`: the server does not know the session (never opened there — a new
 * master after a failover — or ended). */
export function isNoSuchSession(error: unknown): boolean {
  return error instanceof Error && /^ERR no such session/.test(error.message);
}

/**
 * How long a lease (or a session's grace) of `ms` counts for its holder, from when it began:
 * `ms` less a clock drift allowance of 1% and 2 ms, the drift factor of the Redlock algorithm
 * (the server's clock may run a little fast, and a grant handed over after a wait was made a
 * little before its reply came).
 */
export function countedLease(ms: number): number {
  return Math.max(ms - (ms / 100 + 2), 0);
}

/** A holding tied to a session, as the session sees it. */
export interface Tied {
  /** The session may have ended: the holding is lost for good (its signal aborts); `why` says
   * why. */
  sessionLost(why: string): void;
  /** The session was replaced by a new one: tie the holding to it (a renewal tied to it) while
   * `from`'s deadline has not passed; refused, the holding is lost. */
  retie(from: Session): Promise<void>;
}

/** The ms of the monotonic clock the sessions' deadlines are kept on. */
const now = (): number => performance.now();

/** One session on the server: its id, its grace, and until when this client counts it alive. */
export class Session {
  /** The holdings tied to it, as far as this client knows. */
  readonly holdings = new Set<Tied>();
  /** Replaced by a newer session, expired or closed: no holding is tied to it from now on. */
  over = false;
  /** Its deadline passed (or the client was closed): its holdings are lost. */
  expired = false;
  /** When this client stops counting on it, ms of {@link now}. */
  private deadline: number;
  private timer: NodeJS.Timeout | undefined;

  /** `sent`: when the `LOCK.SESSION OPEN` that opened it was sent, ms of {@link now}. */
  constructor(
    readonly keeper: SessionKeeper,
    readonly id: string,
    readonly grace: number,
    sent: number,
  ) {
    this.deadline = sent + countedLease(grace);
    this.arm();
  }

  /** Whether its deadline has not passed. */
  get alive(): boolean {
    return !this.expired && now() < this.deadline;
  }

  /** An attach sent at `sent` (ms of {@link now}) was answered: the server cannot end the
   * session before `sent + grace`. */
  confirm(sent: number): void {
    if (this.expired) return;
    this.deadline = Math.max(this.deadline, sent + countedLease(this.grace));
    this.arm();
  }

  /** Ties `holding` to this session (leaving the one it was tied to). */
  tie(holding: Tied): void {
    this.holdings.add(holding);
  }

  /** Its deadline passed: every holding tied to it is lost, now, before the server can hand
   * one over. */
  expire(why: string): void {
    if (this.expired) return;
    this.expired = this.over = true;
    clearTimeout(this.timer);
    for (const holding of [...this.holdings]) holding.sessionLost(why);
    this.holdings.clear();
  }

  /** The deadline's timer, set again when it moves. */
  private arm(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (now() < this.deadline) this.arm();
      else this.keeper.expired(this);
    }, Math.max(this.deadline - now(), 0));
    this.timer.unref?.();
  }
}

/** How long the reply to `LOCK.SESSION OPEN` is waited for, ms. */
const OPEN_TIMEOUT = 2_000;
/** How soon a heartbeat that failed (no connection, no reply) is tried again, at most, ms. */
const RETRY_MS = 50;

/**
 * Keeps one session open on one master for a client: opened on demand ({@link current}) on a
 * connection of its own, attached by a heartbeat every third of the grace (reconnecting), and
 * replaced when the server no longer knows it.
 */
export class SessionKeeper {
  /** The session connection, and whether it still needs its name and `NO-EVICT`. */
  private link: { dedicated: Dedicated; fresh: boolean } | undefined;
  private linking: Promise<{ dedicated: Dedicated; fresh: boolean }> | undefined;
  /** The session in use; none before the first acquire, and after one expired. */
  private session: Session | undefined;
  private opening: Promise<Session> | undefined;
  private beat: NodeJS.Timeout | undefined;
  private closed = false;

  /** `open`: a new dedicated connection to the master; `grace`: asked for, ms (undefined: the
   * server's). */
  constructor(
    public open: () => Promise<Dedicated>,
    private readonly grace: number | undefined,
  ) {}

  /**
   * The session to tie holdings to: the one in use while its deadline has not passed, or a new
   * one (`LOCK.SESSION OPEN` on the session connection, connected first if need be). Rejects
   * when it cannot be opened (the connect error, `LostReply`, an error reply such as
   * `READONLY`), with {@link PoolClosed} once the client was closed.
   */
  current(): Promise<Session> {
    if (this.closed) return Promise.reject(new PoolClosed('the client was closed'));
    const session = this.session;
    if (session && !session.alive) this.expired(session);
    if (this.session) return Promise.resolve(this.session);
    this.opening ??= this.openSession().finally(() => {
      this.opening = undefined;
    });
    return this.opening;
  }

  /** The server answered `ERR no such session` to a command tied to `session`: a new session
   * replaces it, and the holdings tied to it are tied to the new one while `session`'s deadline
   * lets them. */
  replaced(session: Session): void {
    if (session.over) return;
    session.over = true;
    if (this.session === session) this.session = undefined;
    for (const holding of [...session.holdings]) void holding.retie(session);
  }

  /** `session`'s deadline passed with no newer attach answered: its holdings are lost, and it
   * is closed on the server if it still is open there (nothing of it counts any more). */
  expired(session: Session): void {
    session.expire(`no heartbeat of the session was answered within its grace (${session.grace} ms): the server may have released the lock`);
    if (this.session !== session) return;
    this.session = undefined;
    clearTimeout(this.beat);
    const link = this.link;
    if (link?.dedicated.alive()) void this.request(link, [['LOCK.SESSION', 'CLOSE', session.id]], OPEN_TIMEOUT).catch(() => {});
  }

  /** The client was closed: `LOCK.SESSION CLOSE` releases every holding of the session at once
   * (they are lost: their signals abort), and the session connection is closed. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.beat);
    const session = this.session;
    this.session = undefined;
    const link = this.link;
    if (session) {
      session.expire('the client was closed: its session released the lock');
      if (link?.dedicated.alive()) await this.request(link, [['LOCK.SESSION', 'CLOSE', session.id]], OPEN_TIMEOUT).catch(() => {});
    }
    this.drop();
  }

  private async openSession(): Promise<Session> {
    const link = await this.connection();
    const sent = now();
    const open = ['LOCK.SESSION', 'OPEN', ...(this.grace === undefined ? [] : ['GRACE', String(this.grace)])];
    const [reply] = await this.request(link, [open], OPEN_TIMEOUT);
    if (reply instanceof Error) {
      // READONLY: the connection reached a replica (a failover demoted its server); a new
      // connection finds the master.
      if (reply.message.startsWith('READONLY')) this.drop();
      throw reply;
    }
    if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`LOCK.SESSION OPEN replied ${String(reply)}: not a session`);
    if (this.closed) throw new PoolClosed('the client was closed');
    const session = new Session(this, String(reply[0]), Number(reply[1]), sent);
    this.session = session;
    this.schedule(session.grace / 3);
    return session;
  }

  /** The heartbeat in `ms`. */
  private schedule(ms: number): void {
    clearTimeout(this.beat);
    this.beat = setTimeout(() => void this.heartbeat(), Math.max(ms, 0));
    this.beat.unref?.();
  }

  /** `LOCK.SESSION ATTACH id` on the session connection (a new one if it dropped): answered,
   * the session's deadline moves to a grace after it was sent; `ERR no such session`, a new
   * session replaces it; no reply, or no connection, tried again soon. */
  private async heartbeat(): Promise<void> {
    const session = this.session;
    if (!session || this.closed) return;
    const sent = now();
    let next = session.grace / 3;
    try {
      const link = await this.connection();
      const [reply] = await this.request(link, [['LOCK.SESSION', 'ATTACH', session.id]], session.grace / 3);
      if (isNoSuchSession(reply)) {
        this.replaced(session);
        if (session.holdings.size > 0) await this.current().catch(() => {});
      } else if (reply instanceof Error) {
        // READONLY (a replica now), another user's, ...: on a new connection again soon.
        this.drop();
        next = Math.min(next, RETRY_MS);
      } else {
        session.confirm(sent);
      }
    } catch {
      next = Math.min(next, RETRY_MS);
    }
    if (this.session && !this.closed) this.schedule(sent + next - now());
  }

  /** The session connection: the open one, or a new one. */
  private connection(): Promise<{ dedicated: Dedicated; fresh: boolean }> {
    if (this.link?.dedicated.alive()) return Promise.resolve(this.link);
    this.drop();
    this.linking ??= this.open().then(
      (dedicated) => {
        this.linking = undefined;
        if (this.closed) {
          dedicated.close();
          throw new PoolClosed('the client was closed');
        }
        this.link = { dedicated, fresh: true };
        return this.link;
      },
      (error: unknown) => {
        this.linking = undefined;
        throw error;
      },
    );
    return this.linking;
  }

  /** Closes the session connection (the session stays attached to none until the next). */
  private drop(): void {
    this.link?.dedicated.close();
    this.link = undefined;
  }

  /**
   * `commands` on the session connection, after `CLIENT NO-EVICT on` and `CLIENT SETNAME
   * leasehold-session` on a new one (their errors ignored: older servers, ACLs): their replies,
   * an error reply as an `Error` value. Rejects when not every reply came within `timeoutMs`
   * or the connection failed, and closes it.
   */
  private async request(link: { dedicated: Dedicated; fresh: boolean }, commands: string[][], timeoutMs: number): Promise<unknown[]> {
    const setup = link.fresh ? [['CLIENT', 'NO-EVICT', 'on'], ['CLIENT', 'SETNAME', 'leasehold-session']] : [];
    link.fresh = false;
    let timer: NodeJS.Timeout | undefined;
    const expiry = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the session connection gave no reply within ${timeoutMs} ms`)), timeoutMs);
    });
    const replying = link.dedicated.pipeline([...setup, ...commands]);
    replying.catch(() => {});
    try {
      const replies = (await Promise.race([replying, expiry])).slice(setup.length).map(([reply]) => reply);
      const failure = replies.find((reply) => reply instanceof Error && !/^[A-Z]+ /.test(reply.message));
      if (failure) throw failure;
      return replies;
    } catch (error) {
      if (this.link === link) this.drop();
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }
}
