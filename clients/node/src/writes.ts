/**
 * How a write on a lock reaches the master, and its replicas before it counts.
 *
 * - Sync off: a grant without waiting and a renewal go over the program's own connection (one
 *   tied to a session: over a connection of the sync pool, with no sync behind it).
 * - A grant without waiting, or a renewal, synced: one pipeline on a connection of the sync
 *   pool, never `MULTI` — the write, `LOCK.INSYNC`, `WAIT h`, `LOCK.INSYNC` — where `h` is the
 *   members the master's last `LOCK.INSYNC` showed; if the write does not count because `h`
 *   was too small, one more `WAIT` for every member and `LOCK.INSYNC` on the same connection (a
 *   `WAIT` covers every earlier write on its connection), within the sync timeout. Synced
 *   writes made in the same tick to the same master share that pipeline: the writes, then one
 *   `LOCK.INSYNC`, `WAIT`, `LOCK.INSYNC`.
 * - A wait in the server: on a connection of the wait pool, the acquire with the same tail
 *   pipelined behind it — the server runs it only once the acquire is answered.
 * - A fixed replica count (`sync.replicas`): `WAIT n` alone after the writes.
 * - A write whose command ends in `SESSION` is tied to the client's session on the master it
 *   is sent to (each master has its own, and a redirected write goes to another): the
 *   connection lent to it is bound to that session (`LOCK.SESSION USE id`, first in the same
 *   pipeline, when it is not yet: {@link Own.pipeline}). Tied and untied writes made in the
 *   same tick go in pipelines of their own. `ERR no such session` tells that session's keeper
 *   it was replaced.
 */

import { Connection, Exhausted, Own, PoolKind } from './connection.js';
import { Session, isNoSuchSession, wantsSession } from './session.js';
import {
  DEFAULT_SYNC_TIMEOUT, INSYNC, NotReplicatedError, Shortfall, SyncOptions, acksOf, inSyncOf, shortfall, waitCommand,
} from './sync.js';

/** A write's reply (an error reply as an `Error` value), when it came, and how far it reached
 * the replicas. */
interface Outcome {
  reply: unknown;
  /** When the write's reply came, ms since the epoch (a wait's grant was made just before). */
  answered: number;
  /** Why it does not count, if so: how far it got, or the server's error reply to a command of
   * the sync. */
  unsynced?: Shortfall | Error;
  /** The session the write was tied to, if it asked for one. */
  tie?: Session;
}

/** A write's reply that counts (an error reply rejects), when it came (ms since the epoch), and
 * the session it tied the holding to, if it asked for one. */
export interface Written {
  reply: unknown;
  answered: number;
  tie?: Session;
}

/** The writes of one lock (or set of locks), routed by `key`. */
export class Writes {
  private readonly sync: SyncOptions;
  /** Writes wait for replicas. */
  private readonly synced: boolean;
  /** Which synced writes of other locks may share a pipeline with these: the same sync. */
  private readonly group: string;

  /** `margin`: how long after a reply should have come it is given up on, ms. */
  constructor(
    readonly connection: Connection,
    private readonly key: string,
    sync: SyncOptions | false | undefined,
    private readonly margin: number,
  ) {
    this.sync = sync || {};
    this.synced = sync !== false && this.sync.replicas !== 0;
    this.group = JSON.stringify([this.sync.replicas, this.syncMs, this.sync.aof ?? false, margin]);
  }

  /** The sync timeout, ms. */
  private get syncMs(): number {
    return this.sync.timeout ?? DEFAULT_SYNC_TIMEOUT;
  }

  /**
   * A grant without waiting — an acquire, or a holder's re-entry or change of mode: the reply
   * (null when busy). A grant too few replicas had in time is given back with `release`, if
   * given (else it stays made on the master), and rejected with {@link NotReplicatedError}, as
   * is one that found no sync connection free within the sync timeout (then nothing was sent).
   */
  async grant(command: string[], release?: string[]): Promise<Written> {
    if (!this.synced && !wantsSession(command)) return this.sent(command);
    const outcome = await this.syncedWrite(command, 'grant');
    return this.counted(outcome, outcome.reply !== null, 'grant', release);
  }

  /**
   * An acquire that waits in the server up to `waitMs` (0: no limit), on a connection of the
   * wait pool queued for until `deadline` (ms since the epoch; `undefined`: no limit), else
   * rejected with {@link Exhausted}. A grant too few replicas had is released with `release`
   * and rejected with {@link NotReplicatedError}.
   */
  async wait(
    command: string[],
    waitMs: number,
    deadline: number | undefined,
    release: string[],
  ): Promise<Written> {
    const [outcome] = await this.exchange('wait', this.key, [command], deadline, waitMs);
    return this.counted(outcome, outcome.reply !== null, 'grant', release);
  }

  /** A renewal: the reply. One `applied` but too few replicas had in time — or that found no
   * sync connection free within the sync timeout — rejects with {@link NotReplicatedError}. */
  async renew(command: string[], applied: (reply: unknown) => boolean): Promise<Written> {
    if (!this.synced && !wantsSession(command)) return this.sent(command);
    const outcome = await this.syncedWrite(command, 'renewal');
    return this.counted(outcome, applied(outcome.reply), 'renewal');
  }

  /** A write over the program's own connection, not synced, tied to no session. */
  private async sent(command: string[]): Promise<Written> {
    const reply = await this.connection.send(command, this.key);
    return { reply, answered: Date.now() };
  }

  /** The write that counts (or was not `applied`); otherwise the grant given back with
   * `release` (if any) and the rejection. */
  private async counted(outcome: Outcome, applied: boolean, write: 'grant' | 'renewal', release?: string[]): Promise<Written> {
    const unsynced = outcome.unsynced;
    if (!applied || !unsynced) return { reply: outcome.reply, answered: outcome.answered, tie: outcome.tie };
    if (release) await this.connection.send(release, this.key);
    throw unsynced instanceof Error ? unsynced : new NotReplicatedError(unsynced.acked, unsynced.wanted, write, unsynced.reason);
  }

  /**
   * A write that does not wait, synced, in the pipeline of the synced writes made in this tick
   * to the same master and tied alike (to the session, or not) — or on its own after a
   * redirection (`MOVED` / `ASK`). Rejects with its error reply; with {@link
   * NotReplicatedError} when no connection came free within the sync timeout (nothing was sent).
   */
  private async syncedWrite(command: string[], write: 'grant' | 'renewal'): Promise<Outcome> {
    try {
      const group = wantsSession(command) ? `${this.group} tied` : this.group;
      let outcome = await this.connection.together(this.key, group, command, (key, commands) =>
        this.exchange('sync', key, commands, Date.now() + this.syncMs, 0));
      if (outcome.reply instanceof Error && /^(MOVED|ASK) /.test(outcome.reply.message)) {
        [outcome] = await this.exchange('sync', this.key, [command], Date.now() + this.syncMs, 0);
      }
      if (outcome.reply instanceof Error) throw outcome.reply;
      return outcome;
    } catch (error) {
      if (!(error instanceof Exhausted)) throw error;
      const wanted = this.sync.replicas ?? this.connection.membersSeen(this.key);
      throw new NotReplicatedError(0, wanted, write, `no sync connection came free within ${this.syncMs} ms: nothing was sent`);
    }
  }

  /**
   * `commands` on a connection of the `kind` pool to the master serving `key`, with the sync
   * behind them: each command's outcome. Commands ending in `SESSION` (all of them, or none)
   * are tied to the client's session on that master (opened first if need be; their outcomes'
   * `tie`), on a connection bound to it. A lone command's error reply rejects (so that a
   * redirection is followed); with several, each is its outcome's `reply`. Rejects with {@link
   * LostReply} or {@link Exhausted} too, and with why a session could not be opened.
   */
  private exchange(kind: PoolKind, key: string, commands: string[][], deadline: number | undefined, waitMs: number): Promise<Outcome[]> {
    const tied = commands.some(wantsSession);
    return this.connection.lend(kind, key, deadline, async (own) => {
      const syncMs = kind === 'sync' ? Math.max((deadline ?? 0) - Date.now(), 1) : this.syncMs;
      const timeout = waitMs === 0 && kind === 'wait' ? undefined : waitMs + syncMs + this.margin;
      const hint = this.sync.replicas ?? own.seen.hint(own.master);
      const wait = waitCommand(this.sync, hint, syncMs);
      const tail = !this.synced ? [] : this.sync.replicas === undefined ? [INSYNC, wait, INSYNC] : [wait];
      const { replies, arrived } = await own.pipeline([...commands, ...tail], timeout);
      const written = replies.slice(0, commands.length);
      const tie = tied ? own.tie : undefined;
      if (tie && written.some(isNoSuchSession)) tie.keeper.replaced(tie);
      if (commands.length === 1 && written[0] instanceof Error) throw written[0];
      const wrote = written.some((reply) => reply !== null && !(reply instanceof Error));
      // The sync began when the last write was answered.
      const syncEnd = arrived[commands.length - 1] + syncMs;
      const unsynced = this.synced ? await this.unsynced(own, replies.slice(commands.length), hint, syncEnd, wrote) : undefined;
      return written.map((reply, at) => ({ reply, answered: arrived[at], unsynced, tie: wantsSession(commands[at]) ? tie : undefined }));
    }, tied);
  }

  /**
   * Why writes do not count, from the `replies` to their sync — `WAIT n` for a fixed count, else
   * `LOCK.INSYNC`, `WAIT hint`, `LOCK.INSYNC` — or `undefined` when they count. When something
   * was `written` and one more `WAIT` for every in-sync member may yet make it count, that
   * `WAIT` and a `LOCK.INSYNC` follow on the same connection if there is time left before
   * `syncEnd` (ms since the epoch), and their replies decide instead.
   */
  private async unsynced(own: Own, replies: unknown[], hint: number, syncEnd: number, written: boolean): Promise<Shortfall | Error | undefined> {
    const refused = replies.find((reply) => reply instanceof Error);
    if (refused) return refused as Error;
    if (this.sync.replicas !== undefined) {
      const { replicas, local } = acksOf(this.sync, replies[0]);
      const acked = local ? replicas : 0;
      if (acked >= hint) return undefined;
      return { acked, wanted: hint, reason: `${acked} of the ${hint} replicas wanted acknowledged within ${this.syncMs} ms` };
    }
    const [before, after] = [inSyncOf(replies[0]), inSyncOf(replies[2])];
    if (before instanceof Error) return before;
    if (after instanceof Error) return after;
    own.seen.heard(own.master, before);
    const trip = { before, hint, waited: acksOf(this.sync, replies[1]), after };
    const short = shortfall(trip, own.seen.heard(own.master, after), this.syncMs);
    const left = syncEnd - Date.now();
    if (!short?.again || !written || left < 1) return short;
    const {
      replies: [waited, last],
    } = await own.pipeline([waitCommand(this.sync, after.members, left), INSYNC], left + this.margin);
    const final = inSyncOf(last);
    if (waited instanceof Error) return waited;
    if (final instanceof Error) return final;
    return shortfall({ ...trip, waited: acksOf(this.sync, waited), after: final }, own.seen.heard(own.master, final), this.syncMs);
  }
}
