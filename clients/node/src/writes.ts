/**
 * How a write on a lock reaches the master, and its replicas before it counts.
 *
 * - Sync off: a grant without waiting and a renewal go over the program's own connection.
 * - A grant without waiting, or a renewal, synced: one pipeline on a connection of the sync
 *   pool — `INFO replication` (when the count is learned), the write, `WAIT k` — where `k` is
 *   the count learned so far; the `INFO` reply is learned, and if it raised the count past `k`,
 *   one more `WAIT` on the same connection (a `WAIT` covers every earlier write on its
 *   connection). One round trip, and the count as fresh as the write. Synced writes made in the
 *   same tick to the same master share that pipeline: one `INFO`, the writes, one `WAIT`.
 * - A wait in the server: on a connection of the wait pool, the acquire with `INFO` and `WAIT`
 *   pipelined behind it — the server runs them only once the acquire is answered, so the count
 *   is read at the grant, not before the wait.
 */

import { Connection, Exhausted, Own, PoolKind } from './connection.js';
import { DEFAULT_SYNC_TIMEOUT, INFO_REPLICATION, NotReplicatedError, SyncOptions, ackedBy, waitCommand } from './sync.js';

/** A write's reply (an error reply as an `Error` value), when it came, and how far it reached
 * the replicas. */
interface Outcome {
  reply: unknown;
  /** When the write's reply came, ms since the epoch (a wait's grant was made just before). */
  answered: number;
  acked: number;
  wanted: number;
  /** The server's error reply to the `INFO` or `WAIT` of the sync, if any. */
  refused?: Error;
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
  async grant(command: string[], release?: string[]): Promise<unknown> {
    if (!this.synced) return this.connection.send(command, this.key);
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
  ): Promise<{ reply: unknown; answered: number }> {
    const [outcome] = await this.exchange('wait', this.key, [command], deadline, waitMs);
    const reply = await this.counted(outcome, outcome.reply !== null, 'grant', release);
    return { reply, answered: outcome.answered };
  }

  /** A renewal: the reply. One `applied` but too few replicas had in time — or that found no
   * sync connection free within the sync timeout — rejects with {@link NotReplicatedError}. */
  async renew(command: string[], applied: (reply: unknown) => boolean): Promise<unknown> {
    if (!this.synced) return this.connection.send(command, this.key);
    const outcome = await this.syncedWrite(command, 'renewal');
    return this.counted(outcome, applied(outcome.reply), 'renewal');
  }

  /** The reply of a write that reached enough replicas; otherwise the grant given back with
   * `release` (if any) and the rejection. */
  private async counted(outcome: Outcome, applied: boolean, write: 'grant' | 'renewal', release?: string[]): Promise<unknown> {
    if (!applied || (!outcome.refused && outcome.acked >= outcome.wanted)) return outcome.reply;
    if (release) await this.connection.send(release, this.key);
    throw outcome.refused ?? new NotReplicatedError(outcome.acked, outcome.wanted, write);
  }

  /**
   * A write that does not wait, synced, in the pipeline of the synced writes made in this tick
   * to the same master — or on its own after a redirection (`MOVED` / `ASK`). Rejects with its
   * error reply; with {@link NotReplicatedError} when no connection came free within the sync
   * timeout (nothing was sent).
   */
  private async syncedWrite(command: string[], write: 'grant' | 'renewal'): Promise<Outcome> {
    try {
      let outcome = await this.connection.together(this.key, this.group, command, (key, commands) =>
        this.exchange('sync', key, commands, Date.now() + this.syncMs, 0));
      if (outcome.reply instanceof Error && /^(MOVED|ASK) /.test(outcome.reply.message)) {
        [outcome] = await this.exchange('sync', this.key, [command], Date.now() + this.syncMs, 0);
      }
      if (outcome.reply instanceof Error) throw outcome.reply;
      return outcome;
    } catch (error) {
      if (!(error instanceof Exhausted)) throw error;
      throw new NotReplicatedError(0, this.sync.replicas ?? this.connection.replicasKnown(this.key), write);
    }
  }

  /**
   * `commands` on a connection of the `kind` pool to the master serving `key`, with the sync
   * around them (for writes that do not wait, `INFO` before them; for a wait, behind it), and
   * one more `WAIT` if the count grew: each command's outcome. A lone command's error reply
   * rejects (so that a redirection is followed); with several, each is its outcome's `reply`.
   * Rejects with {@link LostReply} or {@link Exhausted} too.
   */
  private exchange(kind: PoolKind, key: string, commands: string[][], deadline: number | undefined, waitMs: number): Promise<Outcome[]> {
    return this.connection.lend(kind, key, deadline, async (own) => {
      const syncMs = kind === 'sync' ? Math.max((deadline ?? 0) - Date.now(), 1) : this.syncMs;
      const timeout = waitMs === 0 && kind === 'wait' ? undefined : waitMs + syncMs + this.margin;
      const fixed = this.sync.replicas;
      const known = fixed ?? own.learned.count;
      const info = this.synced && fixed === undefined ? [INFO_REPLICATION] : [];
      const wait = this.synced ? [waitCommand(this.sync, known, syncMs)] : [];
      const sent = kind === 'wait' ? [...commands, ...info, ...wait] : [...info, ...commands, ...wait];
      const { replies, arrived } = await own.pipeline(sent, timeout);
      const first = sent.indexOf(commands[0]);
      const written = replies.slice(first, first + commands.length);
      if (commands.length === 1 && written[0] instanceof Error) throw written[0];
      const wrote = written.some((reply) => reply !== null && !(reply instanceof Error));
      const synced = this.synced ? await this.replicated(own, replies, sent, known, syncMs, wrote) : { acked: 0, wanted: 0 };
      return written.map((reply, at) => ({ reply, answered: arrived[first + at], ...synced }));
    });
  }

  /** How many replicas the writes reached, of how many wanted: from the `INFO` and `WAIT`
   * replies, and — when something was written — after one more `WAIT` if the count grew past
   * the `known` one waited for. */
  private async replicated(
    own: Own,
    replies: unknown[],
    sent: string[][],
    known: number,
    syncMs: number,
    wrote: boolean,
  ): Promise<Omit<Outcome, 'reply' | 'answered'>> {
    const refused = replies.find((reply, at) => reply instanceof Error && (sent[at] === INFO_REPLICATION || at === sent.length - 1));
    if (refused) return { acked: 0, wanted: known, refused: refused as Error };
    const info = sent.indexOf(INFO_REPLICATION);
    const wanted = info < 0 ? known : own.learned.heard(String(replies[info]));
    // A master this client saw replaced: none of its writes count.
    if (wanted === undefined) return { acked: 0, wanted: Math.max(known, 1) };
    const acked = ackedBy(this.sync, replies[replies.length - 1]);
    if (!wrote || acked >= wanted || wanted <= known) return { acked, wanted };
    const {
      replies: [again],
    } = await own.pipeline([waitCommand(this.sync, wanted, syncMs)], syncMs + this.margin);
    if (again instanceof Error) return { acked: 0, wanted, refused: again };
    return { acked: ackedBy(this.sync, again), wanted };
  }
}
