/**
 * NagareClient: an asynchronous, buffered forward-protocol v1 sender.
 *
 * emit() encodes the event at once into a per-tag buffer and returns; a flush
 * (every `flushIntervalMs`, or sooner when a batch is large) cuts each tag's
 * buffer into one PackedForward frame and writes the frames to the active
 * connection. Frames stay counted in the buffer until they are handed to the
 * kernel (or, with `requireAck`, until the server acknowledged them).
 */
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import * as tls from "node:tls";
import { Decoder, type Encoder } from "@msgpack/msgpack";
import { EventTime, encodeCompressedFrame, encodePackedFrame, extensionCodec, newEncoder, nowInto } from "./codec";
import { EntryBuffer } from "./entrybuf";
import { encodePing, newSalt, parseHelo, parsePong, verifyPong } from "./handshake";
import { SpillFile } from "./spill";

export type Overflow = "spill" | "block" | "drop";

export interface ServerAddress {
  /** TCP host (default 127.0.0.1). */
  host?: string;
  /** TCP port (default 24224). */
  port?: number;
  /** UNIX socket path; replaces host/port. */
  path?: string;
  /** TLS: true, or options for tls.connect (ca, cert, key, servername, rejectUnauthorized...). */
  tls?: boolean | tls.ConnectionOptions;
}

export interface ClientOptions extends ServerAddress {
  /** Servers in order of preference; the first is the primary. Overrides host/port/path/tls. */
  servers?: ServerAddress[];
  /** Shared key: enables the HELO/PING/PONG handshake. */
  sharedKey?: string;
  /** User name and password, sent when the server asks for user authentication. */
  username?: string;
  password?: string;
  /** Host name sent in PING (default os.hostname()). */
  clientHostname?: string;
  /** Prefix joined to every tag with a dot. */
  tagPrefix?: string;
  /** At-least-once: add a chunk id to every frame and resend frames not acked in time. */
  requireAck?: boolean;
  /** How long to wait for an ack before resending (ms, default 10000). */
  ackTimeoutMs?: number;
  /** Memory buffer limit in bytes of encoded events (default 32 MiB). */
  bufferLimit?: number;
  /** A tag's batch is cut into a frame when it reaches this many bytes (default 1 MiB). */
  maxBatchBytes?: number;
  /** Delay between an emit and the flush that sends it (ms, default 20). */
  flushIntervalMs?: number;
  /** What emit() does when the memory buffer is full (default "spill" with a spillPath, else "drop"). */
  overflow?: Overflow;
  /**
   * Spill file path. Default (with overflow "spill" set): a file in the temp
   * folder private to this client, removed by close(). With a configured path, what close() could not deliver
   * stays in the file and a client started later with the same path sends it.
   */
  spillPath?: string;
  /** Spill file size limit in bytes (default 256 MiB); past it events are dropped. */
  spillLimit?: number;
  /** overflow = "block": longest wait of emitAsync() for room, then the event is dropped (ms, default 10000). */
  blockTimeoutMs?: number;
  /** Connect (and handshake) timeout per attempt (ms, default 5000). */
  connectTimeoutMs?: number;
  /** Reconnect backoff: first delay and cap (ms, defaults 100 and 30000); jitter in [d/2, d]. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** While on a secondary server, how often to try the primary again (ms, default 10000). */
  primaryRetryMs?: number;
  /** Send CompressedPackedForward (gzip) frames. */
  compress?: boolean;
  /** Called with every error (connect failures, handshake, drops). Never throws into emit(). */
  onError?: (err: Error) => void;
}

export interface ClientStats {
  /** Events delivered (written to the socket; with requireAck: acknowledged). */
  sent: number;
  /** Events in memory not yet delivered (including frames waiting for an ack). */
  buffered: number;
  /** Bytes of those events. */
  bufferedBytes: number;
  /** Events written to the spill file and fsync'd, since start. */
  spilled: number;
  /** Events waiting in the spill file now, fsync'd (after close(): what the file keeps). */
  spillPending: number;
  /** Events dropped (buffer and spill full, overflow "drop", bad records, close timeout). */
  dropped: number;
  /** Successful connections after the first one. */
  reconnects: number;
  /** Frames resent after a lost connection or a missing ack. */
  retried: number;
  /** Frames acknowledged by the server (requireAck). */
  acked: number;
}

interface Frame {
  seq: number;
  tag: string;
  entries: Buffer;
  count: number;
  chunk?: string;
  sentAt: number;
}

interface Conn {
  socket: net.Socket;
  index: number;
  ready: boolean;
  dead: boolean;
  needDrain: boolean;
  retiring: boolean;
  /** requireAck: frames written and waiting for their ack, by chunk id. */
  inflight: Map<string, Frame>;
  /** Frames written but whose write callback has not fired yet. */
  unconfirmed: Set<Frame>;
  waiter?: { resolve: (msg: unknown) => void; reject: (e: Error) => void };
}

let instances = 0;
const KiB = 1024;
const MiB = 1024 * KiB;
/** close() retries the servers this often until its deadline. */
const CLOSING_RETRY_MS = 100;
/**
 * While no server answers (with a configured spillPath), events go to the
 * spill file at emit() and the file is fsync'd this long after the first
 * unsynced write: a kill -9 during an outage loses at most this much. Also
 * how long any spill write waits for its fsync. The same in every SDK.
 */
const SPILL_SYNC_MS = 200;
/** Drops are reported to onError at most once per this window, with their count. */
const DROP_REPORT_MS = 1000;

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function toError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

function describe(s: ServerAddress): string {
  return s.path ? `unix:${s.path}` : `${s.host ?? "127.0.0.1"}:${s.port ?? 24224}`;
}

export class NagareClient {
  private readonly servers: ServerAddress[];
  private readonly opts: Required<
    Pick<
      ClientOptions,
      | "ackTimeoutMs"
      | "bufferLimit"
      | "maxBatchBytes"
      | "flushIntervalMs"
      | "overflow"
      | "spillLimit"
      | "blockTimeoutMs"
      | "connectTimeoutMs"
      | "backoffBaseMs"
      | "backoffMaxMs"
      | "primaryRetryMs"
    >
  > &
    ClientOptions;
  private readonly encoder: Encoder = newEncoder();
  private readonly tagBufs = new Map<string, EntryBuffer & { tag: string }>();
  private readonly clock = { sec: 0, nsec: 0 };
  private queue: Frame[] = [];
  private seq = 0;
  private conn: Conn | undefined;
  private readonly conns = new Set<Conn>();
  private connecting = false;
  private everConnected = false;
  private backoffAttempt = 0;
  private backoffTimer: NodeJS.Timeout | undefined;
  private backoffWake: (() => void) | undefined;
  private flushTimer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private ackTimer: NodeJS.Timeout | undefined;
  private primaryTimer: NodeJS.Timeout | undefined;
  private spill: SpillFile | undefined;
  private spillSyncTimer: NodeJS.Timeout | undefined;
  /** No server answered the last connect round: emit() writes to the spill file. */
  private outage = false;
  private closing = false;
  private unreportedDrops = 0;
  private lastDropError: Error | undefined;
  private readonly dropReasons = new Set<string>();
  private dropReportTimer: NodeJS.Timeout | undefined;
  private closePromise: Promise<boolean> | undefined;
  private closed = false;
  private blockWaiters: { need: number; resolve: (ok: boolean) => void }[] = [];
  private readonly counters = {
    sent: 0,
    buffered: 0,
    bufferedBytes: 0,
    spilled: 0,
    dropped: 0,
    reconnects: 0,
    retried: 0,
    acked: 0,
  };
  private readonly tagPrefix: string;

  constructor(options: ClientOptions = {}) {
    this.opts = {
      ackTimeoutMs: 10_000,
      bufferLimit: 32 * MiB,
      maxBatchBytes: 1 * MiB,
      flushIntervalMs: 20,
      // the shared default (sdk/README.md): a spill file only where the next run finds it
      overflow: options.spillPath === undefined ? "drop" : "spill",
      spillLimit: 256 * MiB,
      blockTimeoutMs: 10_000,
      connectTimeoutMs: 5_000,
      backoffBaseMs: 100,
      backoffMaxMs: 30_000,
      primaryRetryMs: 10_000,
      ...stripUndefined(options),
    };
    if (!["spill", "block", "drop"].includes(this.opts.overflow)) {
      throw new TypeError(`overflow must be "spill", "block" or "drop", got ${String(this.opts.overflow)}`);
    }
    this.servers =
      options.servers && options.servers.length > 0
        ? options.servers.map((s) => ({ ...s }))
        : [{ host: options.host, port: options.port, path: options.path, tls: options.tls }];
    this.tagPrefix = options.tagPrefix ? `${options.tagPrefix}.` : "";
    // A spill file left by an earlier run is sent first.
    if (this.opts.overflow === "spill" && options.spillPath) {
      this.openSpill();
      if (this.spill && !this.spill.empty) this.schedule(0);
    }
  }

  /** Counters for monitoring. */
  stats(): ClientStats {
    return {
      sent: this.counters.sent,
      buffered: this.counters.buffered,
      bufferedBytes: this.counters.bufferedBytes,
      spilled: this.counters.spilled,
      spillPending: this.spill?.durableEvents ?? 0,
      dropped: this.counters.dropped,
      reconnects: this.counters.reconnects,
      retried: this.counters.retried,
      acked: this.counters.acked,
    };
  }

  /**
   * Queue one event. Never blocks and never throws for delivery problems:
   * returns false when the event was dropped (counted, reported to onError).
   * `record` is a plain object (its own enumerable string keys are sent, in order).
   * `time` defaults to now with nanosecond resolution; a number is epoch milliseconds.
   */
  emit(tag: string, record: object, time?: EventTime | Date | number | bigint): boolean {
    const r = this.encode(tag, record, time);
    if (r === undefined) return false;
    const [eb, size] = r;
    if (
      !this.outage &&
      (this.spill === undefined || this.spill.empty) &&
      this.counters.bufferedBytes + size <= this.opts.bufferLimit
    ) {
      this.accepted(eb, size);
      return true;
    }
    return this.overflow(eb.tag, eb.takeLast(size), false);
  }

  /**
   * Like emit(), but with overflow = "block" it waits (up to blockTimeoutMs)
   * for room in the memory buffer instead of dropping.
   */
  async emitAsync(tag: string, record: object, time?: EventTime | Date | number | bigint): Promise<boolean> {
    const r = this.encode(tag, record, time);
    if (r === undefined) return false;
    const [eb, size] = r;
    if (
      !this.outage &&
      (this.spill === undefined || this.spill.empty) &&
      this.blockWaiters.length === 0 &&
      this.counters.bufferedBytes + size <= this.opts.bufferLimit
    ) {
      this.accepted(eb, size);
      return true;
    }
    const bytes = eb.takeLast(size);
    if (this.opts.overflow !== "block") return this.overflow(eb.tag, bytes, true);
    if (!(await this.waitForRoom(size))) {
      return this.drop(1, new Error(`buffer full for ${this.opts.blockTimeoutMs} ms: event dropped`));
    }
    if (this.closing) return this.drop(1, new Error("client closed while waiting for room: event dropped"));
    this.append(eb.tag, bytes, 1);
    return true;
  }

  /**
   * Send everything buffered (memory and spill file). Resolves true when all
   * of it was delivered, false when `timeoutMs` passed first.
   */
  async flush(timeoutMs = 10_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    this.schedule(0);
    while (!this.idle()) {
      if (Date.now() >= deadline) return false;
      this.ensureConnecting();
      await sleep(5);
    }
    return true;
  }

  /**
   * Flush within `timeoutMs`, then close the connections. Events not delivered
   * by then are kept in the spill file (overflow "spill", sent on the next
   * start) or else dropped and counted. Resolves true when nothing was left.
   */
  async close(timeoutMs = 10_000): Promise<boolean> {
    if (this.closePromise === undefined) this.closePromise = this.doClose(timeoutMs);
    return this.closePromise;
  }

  private async doClose(timeoutMs: number): Promise<boolean> {
    this.closing = true;
    for (const w of this.blockWaiters.splice(0)) w.resolve(false);
    // Reconnect now, not when the current backoff delay ends (backoff() keeps
    // the retries short while closing, until the flush deadline).
    this.backoffWake?.();
    const ok = await this.flush(timeoutMs);
    this.closed = true;
    for (const t of [this.flushTimer, this.ackTimer, this.primaryTimer, this.backoffTimer, this.spillSyncTimer]) {
      if (t) clearTimeout(t);
    }
    if (this.immediate) clearImmediate(this.immediate);
    this.backoffWake?.();
    for (const c of this.conns) {
      // Written but unconfirmed or unacked: still ours to keep or count.
      this.queue.push(...new Set([...c.inflight.values(), ...c.unconfirmed]));
      c.inflight.clear();
      c.unconfirmed.clear();
      c.socket.destroy();
    }
    this.conns.clear();
    this.conn = undefined;
    if (!ok) this.persistLeftovers();
    this.syncSpill();
    this.spill?.close();
    if (this.spill && this.opts.spillPath === undefined) {
      // A default spill file is private to this client: nobody could resend it
      // (its events were counted as dropped by persistLeftovers).
      fs.rmSync(this.spill.path, { force: true });
      this.spill = undefined;
    }
    this.reportDrops();
    return ok;
  }

  // ---------------------------------------------------------------- emit path

  /** Encode the event into its tag's batch; returns the batch and the entry size. */
  private encode(
    tag: string,
    record: object,
    time?: EventTime | Date | number | bigint,
  ): [EntryBuffer & { tag: string }, number] | undefined {
    if (this.closing) {
      this.drop(1, new Error("emit after close(): event dropped"));
      return undefined;
    }
    try {
      if (typeof tag !== "string" || tag.length === 0) throw new TypeError("tag must be a non-empty string");
      if (record === null || typeof record !== "object" || Array.isArray(record) || ArrayBuffer.isView(record)) {
        throw new TypeError("record must be an object (a msgpack map)");
      }
      let sec: number;
      let nsec: number;
      if (time === undefined) {
        nowInto(this.clock);
        sec = this.clock.sec;
        nsec = this.clock.nsec;
      } else {
        const t = EventTime.from(time);
        sec = t.sec;
        nsec = t.nsec;
      }
      const eb = this.batch(this.tagPrefix + tag);
      return [eb, eb.appendEntry(sec, nsec, record, this.encoder)];
    } catch (e) {
      this.drop(1, new Error(`cannot encode event for tag ${String(tag)}: ${toError(e).message}`));
      return undefined;
    }
  }

  private batch(tag: string): EntryBuffer & { tag: string } {
    let eb = this.tagBufs.get(tag);
    if (eb === undefined) {
      eb = Object.assign(new EntryBuffer(), { tag });
      this.tagBufs.set(tag, eb);
    }
    return eb;
  }

  /** Counts `count` entries of `size` bytes just written into eb, and schedules a flush. */
  private accepted(eb: EntryBuffer, size: number, count = 1): void {
    this.counters.buffered += count;
    this.counters.bufferedBytes += size;
    if (eb.len >= this.opts.maxBatchBytes) this.schedule(0);
    else this.schedule(this.opts.flushIntervalMs);
  }

  /** The memory buffer is full (or a spill is draining): spill, or drop. */
  private overflow(tag: string, entry: Uint8Array, viaAsync: boolean): boolean {
    switch (this.opts.overflow) {
      case "spill":
        return this.toSpill(tag, entry, 1);
      case "block":
        return this.drop(
          1,
          new Error(
            viaAsync
              ? "buffer full: event dropped"
              : "buffer full: emit() cannot block the event loop; use emitAsync() to wait for room",
          ),
        );
      default:
        return this.drop(1, new Error("buffer full: event dropped"));
    }
  }

  private append(tag: string, entries: Uint8Array, count: number): void {
    const eb = this.batch(tag);
    eb.appendBytes(entries, count);
    this.accepted(eb, entries.length, count);
  }

  private openSpill(): SpillFile | undefined {
    if (this.spill) return this.spill;
    const p = this.opts.spillPath ?? path.join(os.tmpdir(), `nagare-logger-${process.pid}-${++instances}.spill`);
    try {
      this.spill = new SpillFile(p, this.opts.spillLimit);
    } catch (e) {
      this.report(new Error(`cannot open spill file ${p}: ${toError(e).message}`));
    }
    return this.spill;
  }

  private toSpill(tag: string, entries: Uint8Array, count: number): boolean {
    const spill = this.openSpill();
    if (spill === undefined) return this.drop(count, new Error("buffer full and no spill file: event dropped"));
    try {
      if (!spill.append(tag, count, entries)) {
        return this.drop(count, new Error(`buffer and spill file (${spill.limit} bytes) full: event dropped`));
      }
    } catch (e) {
      return this.drop(count, new Error(`spill write failed: ${toError(e).message}`));
    }
    this.armSpillSync();
    this.schedule(this.opts.flushIntervalMs);
    return true;
  }

  private armSpillSync(): void {
    if (this.spillSyncTimer !== undefined || this.closed) return;
    this.spillSyncTimer = setTimeout(() => {
      this.spillSyncTimer = undefined;
      this.syncSpill();
    }, SPILL_SYNC_MS);
    this.spillSyncTimer.unref(); // the writes are with the OS already
  }

  /** fsync the spill file; only then are its new events counted as spilled. */
  private syncSpill(): void {
    if (this.spill === undefined) return;
    try {
      this.counters.spilled += this.spill.sync();
    } catch (e) {
      this.report(new Error(`spill file fsync failed: ${toError(e).message}`));
      this.armSpillSync();
    }
  }

  /**
   * No server answered a whole connect round: with a configured spill path,
   * what waits in memory goes to the spill file (fsync'd), in front of what
   * the file holds, and emit() writes there until a server answers, so a
   * kill -9 of the application during the outage loses at most SPILL_SYNC_MS.
   */
  private startOutage(): void {
    if (this.outage || this.closed || this.opts.overflow !== "spill" || this.opts.spillPath === undefined) return;
    const spill = this.openSpill();
    if (spill === undefined) return;
    const frames = [...this.queue];
    for (const [tag, tb] of this.tagBufs) {
      if (tb.count > 0) frames.push({ seq: 0, tag, entries: tb.buf.subarray(0, tb.len), count: tb.count, sentAt: 0 });
    }
    try {
      const durable = spill.prepend(frames);
      if (durable === undefined) return; // no room in the file: memory keeps them, as without an outage
      this.counters.spilled += durable;
    } catch (e) {
      this.report(new Error(`spill write failed: ${toError(e).message}`));
      return;
    }
    this.queue = [];
    for (const tb of this.tagBufs.values()) tb.reset();
    this.counters.buffered = 0;
    this.counters.bufferedBytes = 0;
    this.outage = true;
    this.wakeBlocked();
  }

  /**
   * Counts dropped events. onError hears of them once per burst: the first
   * drop starts a DROP_REPORT_MS window, and one error at its end (or at
   * close) gives the count and the reasons.
   */
  private drop(count: number, err: Error): false {
    this.counters.dropped += count;
    this.unreportedDrops += count;
    this.lastDropError = err;
    this.dropReasons.add(err.message);
    if (this.dropReportTimer === undefined && !this.closed) {
      this.dropReportTimer = setTimeout(() => this.reportDrops(), DROP_REPORT_MS);
      this.dropReportTimer.unref();
    }
    return false;
  }

  private reportDrops(): void {
    if (this.dropReportTimer) clearTimeout(this.dropReportTimer);
    this.dropReportTimer = undefined;
    const n = this.unreportedDrops;
    const last = this.lastDropError;
    const reasons = [...this.dropReasons].join("; ");
    this.unreportedDrops = 0;
    this.lastDropError = undefined;
    this.dropReasons.clear();
    if (n === 1 && last) this.report(last);
    else if (n > 1) this.report(new Error(`${n} events dropped: ${reasons}`));
  }

  private report(err: Error): void {
    const cb = this.opts.onError;
    if (cb) {
      try {
        cb(err);
      } catch {
        // an error callback must not break the client
      }
    }
  }

  private waitForRoom(need: number): Promise<boolean> {
    return new Promise((resolve) => {
      const w = {
        need,
        resolve: (ok: boolean) => {
          clearTimeout(timer);
          resolve(ok);
        },
      };
      const timer = setTimeout(() => {
        const i = this.blockWaiters.indexOf(w);
        if (i >= 0) this.blockWaiters.splice(i, 1);
        resolve(false);
      }, this.opts.blockTimeoutMs);
      this.blockWaiters.push(w);
      this.wakeBlocked();
      this.ensureConnecting();
      this.schedule(0);
    });
  }

  /** Let waiting emitAsync() calls in, oldest first, as far as room allows. */
  private wakeBlocked(): void {
    let used = this.counters.bufferedBytes;
    while (this.blockWaiters.length > 0) {
      const w = this.blockWaiters[0] as { need: number; resolve: (ok: boolean) => void };
      // An event larger than the whole buffer goes in when the buffer is empty.
      if (used > 0 && used + w.need > this.opts.bufferLimit) break;
      used += w.need;
      this.blockWaiters.shift();
      w.resolve(true);
    }
  }

  // ------------------------------------------------------------- flush path

  private schedule(delayMs: number): void {
    if (this.closed) return;
    if (delayMs <= 0) {
      if (this.immediate === undefined) {
        this.immediate = setImmediate(() => {
          this.immediate = undefined;
          this.pump();
        });
      }
      return;
    }
    if (this.flushTimer === undefined && this.immediate === undefined) {
      this.flushTimer = setTimeout(() => {
        this.flushTimer = undefined;
        // Write in the check phase, after the poll phase has seen a peer's FIN.
        this.schedule(0);
      }, delayMs);
    }
  }

  private idle(): boolean {
    return this.counters.buffered === 0 && (this.spill === undefined || this.spill.empty);
  }

  /** Move spilled events back into memory, cut batches into frames, write them. */
  private pump(): void {
    if (this.closed) return;
    if (!this.outage) this.drainSpill(); // during an outage the events stay on disk
    for (const [tag, tb] of this.tagBufs) this.cutFrame(tag, tb);
    this.ensureConnecting();
    this.writeFrames();
    this.updateRefs();
  }

  /** Queue a tag's batch as one frame. */
  private cutFrame(tag: string, tb: EntryBuffer): void {
    if (tb.count === 0) return;
    this.queue.push({
      seq: this.seq++,
      tag,
      entries: Buffer.from(tb.buf.subarray(0, tb.len)),
      count: tb.count,
      chunk: this.opts.requireAck ? randomBytes(16).toString("base64") : undefined,
      sentAt: 0,
    });
    tb.reset();
    if (tb.buf.length > 4 * this.opts.maxBatchBytes) this.tagBufs.delete(tag);
  }

  /**
   * Move spilled events back into memory, as far as it has room, in frames of
   * up to maxBatchBytes: writeFrames() then has several in flight at once.
   */
  private drainSpill(): void {
    const spill = this.spill;
    if (spill === undefined) return;
    while (!spill.empty) {
      const size = spill.nextSize();
      if (this.counters.bufferedBytes > 0 && this.counters.bufferedBytes + size > this.opts.bufferLimit) break;
      const rec = spill.next();
      if (rec === undefined) break;
      this.append(rec.tag, rec.entries, rec.count);
      const tb = this.batch(rec.tag);
      if (tb.len >= this.opts.maxBatchBytes) this.cutFrame(rec.tag, tb);
    }
  }

  private writeFrames(): void {
    const c = this.conn;
    if (c === undefined || !c.ready || c.dead || c.needDrain) return;
    while (this.queue.length > 0) {
      const s = c.socket;
      if (s.destroyed || s.readableEnded || !s.writable) {
        this.killConn(c, new Error(`connection to ${describe(this.servers[c.index] ?? {})} closed by peer`));
        return;
      }
      const f = this.queue.shift() as Frame;
      const bytes = this.opts.compress
        ? encodeCompressedFrame(f.tag, f.entries, f.count, f.chunk)
        : encodePackedFrame(f.tag, f.entries, f.count, f.chunk);
      f.sentAt = Date.now();
      if (f.chunk !== undefined) c.inflight.set(f.chunk, f);
      c.unconfirmed.add(f);
      const ok = s.write(bytes, (err) => {
        if (!c.unconfirmed.delete(f)) return;
        if (err) {
          c.inflight.delete(f.chunk ?? "");
          this.requeue([f]);
          return;
        }
        if (f.chunk === undefined) this.delivered(f);
      });
      if (!ok) {
        c.needDrain = true;
        s.once("drain", () => {
          c.needDrain = false;
          this.schedule(0);
        });
        return;
      }
    }
  }

  private delivered(f: Frame): void {
    this.counters.sent += f.count;
    this.counters.buffered -= f.count;
    this.counters.bufferedBytes -= f.entries.length;
    this.backoffAttempt = 0;
    this.wakeBlocked();
    if (this.spill !== undefined && !this.spill.empty) this.schedule(0);
    this.updateRefs();
  }

  /** Put frames back in front of the queue, oldest first. */
  private requeue(frames: Frame[]): void {
    if (frames.length === 0) return;
    this.counters.retried += frames.length;
    this.queue.push(...frames);
    this.queue.sort((a, b) => a.seq - b.seq);
    this.schedule(this.opts.flushIntervalMs);
  }

  private persistLeftovers(): void {
    const frames: Frame[] = [...this.queue];
    this.queue = [];
    for (const [tag, tb] of this.tagBufs) {
      if (tb.count > 0)
        frames.push({ seq: this.seq++, tag, entries: tb.buf.subarray(0, tb.len), count: tb.count, sentAt: 0 });
    }
    this.tagBufs.clear();
    let lost = this.spill && this.opts.spillPath === undefined ? this.spill.pendingEvents : 0;
    // Only a spill file at a configured path is found again by the next start.
    const spill = this.opts.overflow === "spill" && this.opts.spillPath !== undefined ? this.openSpill() : undefined;
    for (const f of frames) {
      if (spill) {
        try {
          if (spill.append(f.tag, f.count, f.entries)) continue; // counted as spilled at the fsync
        } catch {
          // counted as lost below
        }
      }
      lost += f.count;
    }
    this.counters.buffered = 0;
    this.counters.bufferedBytes = 0;
    if (lost > 0) this.drop(lost, new Error(`close(): ${lost} undelivered events dropped`));
  }

  /** Keep the process alive only while there is something to deliver. */
  private updateRefs(): void {
    const busy = !this.idle() && !this.closed;
    for (const c of this.conns) {
      if (busy) c.socket.ref();
      else c.socket.unref();
    }
    if (this.backoffTimer) {
      if (busy) this.backoffTimer.ref();
      else this.backoffTimer.unref();
    }
  }

  // --------------------------------------------------------- connection path

  private ensureConnecting(): void {
    if (this.closed || this.connecting || (this.conn && !this.conn.dead)) return;
    if (this.idle() && this.blockWaiters.length === 0) return;
    this.connecting = true;
    void this.connectLoop();
  }

  private async connectLoop(): Promise<void> {
    try {
      while (!this.closed) {
        for (let i = 0; i < this.servers.length && !this.closed; i++) {
          try {
            const c = await this.open(i);
            if (this.closed) {
              c.socket.destroy();
              return;
            }
            this.activate(c);
            return;
          } catch (e) {
            this.report(toError(e));
          }
        }
        if (this.closed) return;
        this.startOutage();
        await this.backoff();
      }
    } finally {
      this.connecting = false;
    }
  }

  /** The next reconnect delay: base * 2^attempt capped at max, jittered in [d/2, d]. */
  private backoff(): Promise<void> {
    const d = Math.min(this.opts.backoffMaxMs, this.opts.backoffBaseMs * 2 ** this.backoffAttempt);
    this.backoffAttempt = Math.min(this.backoffAttempt + 1, 30);
    let delay = d / 2 + Math.random() * (d / 2);
    // close() is waiting: keep trying until its deadline, a short delay apart
    if (this.closing) delay = Math.min(delay, CLOSING_RETRY_MS);
    return new Promise((resolve) => {
      this.backoffWake = () => {
        this.backoffWake = undefined;
        if (this.backoffTimer) clearTimeout(this.backoffTimer);
        this.backoffTimer = undefined;
        resolve();
      };
      this.backoffTimer = setTimeout(() => this.backoffWake?.(), delay);
      this.updateRefs();
    });
  }

  private activate(c: Conn): void {
    const old = this.conn;
    this.conn = c;
    this.outage = false; // pump() drains the spill file now
    if (this.everConnected) this.counters.reconnects++;
    this.everConnected = true;
    if (old && old !== c) this.retire(old);
    if (c.index > 0) this.startPrimaryProbe();
    else if (this.primaryTimer) {
      clearInterval(this.primaryTimer);
      this.primaryTimer = undefined;
    }
    if (this.opts.requireAck && this.ackTimer === undefined) {
      this.ackTimer = setInterval(() => this.checkAcks(), Math.max(10, Math.min(1000, this.opts.ackTimeoutMs / 4)));
      this.ackTimer.unref();
    }
    this.schedule(0);
    this.updateRefs();
  }

  /** Stop writing to a connection; close it once its acks are in. */
  private retire(c: Conn): void {
    c.retiring = true;
    if (c.inflight.size === 0) c.socket.end();
  }

  private startPrimaryProbe(): void {
    if (this.primaryTimer) return;
    this.primaryTimer = setInterval(() => {
      if (this.closed || this.conn === undefined || this.conn.index === 0 || this.connecting) return;
      this.connecting = true;
      this.open(0)
        .then((c) => {
          if (this.closed) c.socket.destroy();
          else this.activate(c);
        })
        .catch(() => {
          // the primary is still down; stay on the secondary
        })
        .finally(() => {
          this.connecting = false;
          // The secondary may have failed while we probed.
          this.ensureConnecting();
        });
    }, this.opts.primaryRetryMs);
    this.primaryTimer.unref();
  }

  private checkAcks(): void {
    const limit = Date.now() - this.opts.ackTimeoutMs;
    for (const c of this.conns) {
      for (const f of c.inflight.values()) {
        if (f.sentAt <= limit) {
          this.killConn(c, new Error(`no ack for chunk ${f.chunk} within ${this.opts.ackTimeoutMs} ms; resending`));
          break;
        }
      }
    }
  }

  /** Drop a connection: its unacked and unwritten frames go back to the queue. */
  private killConn(c: Conn, err?: Error): void {
    if (!this.conns.has(c)) return;
    this.conns.delete(c);
    c.dead = true;
    if (err) this.report(err);
    const back = new Set<Frame>([...c.inflight.values(), ...c.unconfirmed]);
    c.inflight.clear();
    c.unconfirmed.clear();
    c.socket.destroy();
    c.waiter?.reject(err ?? new Error("connection closed"));
    if (this.conn === c) this.conn = undefined;
    this.requeue([...back]);
    if (!this.closed) this.ensureConnecting();
  }

  private open(index: number): Promise<Conn> {
    const server = this.servers[index] as ServerAddress;
    const name = describe(server);
    return new Promise<Conn>((resolve, reject) => {
      let socket: net.Socket;
      const tlsOpts = server.tls === true ? {} : server.tls || undefined;
      if (server.path) {
        socket = tlsOpts ? tls.connect({ path: server.path, ...tlsOpts }) : net.connect({ path: server.path });
      } else {
        const host = server.host ?? "127.0.0.1";
        const port = server.port ?? 24224;
        socket = tlsOpts
          ? tls.connect({ host, port, servername: net.isIP(host) ? undefined : host, ...tlsOpts })
          : net.connect({ host, port });
      }
      const c: Conn = {
        socket,
        index,
        ready: false,
        dead: false,
        needDrain: false,
        retiring: false,
        inflight: new Map(),
        unconfirmed: new Set(),
      };
      let settled = false;
      const fail = (e: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        c.dead = true;
        socket.destroy();
        reject(new Error(`connect to ${name} failed: ${e.message}`));
      };
      const timer = setTimeout(() => fail(new Error("timed out")), this.opts.connectTimeoutMs);
      socket.on("error", (e) => {
        if (!settled) fail(e);
        else this.killConn(c, new Error(`connection to ${name}: ${e.message}`));
      });
      socket.on("end", () => {
        // The peer closed (FIN): never write into this connection again.
        c.dead = true;
        if (!settled) fail(new Error("closed by server during connect"));
      });
      socket.on("close", () => {
        if (!settled) fail(new Error("closed by server during connect"));
        else this.killConn(c, c.retiring ? undefined : new Error(`connection to ${name} closed`));
      });
      socket.once(tlsOpts ? "secureConnect" : "connect", () => {
        if (socket instanceof net.Socket && !server.path) socket.setNoDelay(true);
        socket.setKeepAlive(true, 30_000);
        this.readLoop(c);
        this.handshake(c)
          .then(() => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            c.ready = true;
            this.conns.add(c);
            resolve(c);
          })
          .catch((e) => fail(toError(e)));
      });
    });
  }

  private nextMessage(c: Conn): Promise<unknown> {
    return new Promise((resolve, reject) => {
      c.waiter = { resolve, reject };
    });
  }

  private async handshake(c: Conn): Promise<void> {
    const key = this.opts.sharedKey;
    if (key === undefined) return;
    const helo = parseHelo(await this.nextMessage(c));
    const salt = newSalt();
    c.socket.write(
      encodePing({
        helo,
        sharedKey: key,
        salt,
        clientHostname: this.opts.clientHostname ?? os.hostname(),
        username: this.opts.username,
        password: this.opts.password,
      }),
    );
    verifyPong(parsePong(await this.nextMessage(c)), salt, helo.nonce, key);
  }

  /** Read server messages: HELO/PONG during the handshake, then acks. */
  private readLoop(c: Conn): void {
    const decoder = new Decoder({ extensionCodec, rawStrings: true });
    void (async () => {
      try {
        for await (const msg of decoder.decodeStream(c.socket)) {
          const w = c.waiter;
          if (w) {
            c.waiter = undefined;
            w.resolve(msg);
            continue;
          }
          if (!c.ready) continue;
          this.onServerMessage(c, msg);
        }
      } catch (e) {
        if (!c.dead) this.killConn(c, new Error(`bad data from server: ${toError(e).message}`));
      }
    })();
  }

  private onServerMessage(c: Conn, msg: unknown): void {
    if (msg === null || typeof msg !== "object" || Array.isArray(msg)) {
      if (Array.isArray(msg) && msg.length > 0 && Buffer.from(msg[0] as Uint8Array).toString() === "HELO") {
        this.killConn(c, new Error("server requires a shared key handshake (set sharedKey)"));
      }
      return;
    }
    const ack = (msg as { ack?: unknown }).ack;
    if (ack === undefined) return;
    const id = ack instanceof Uint8Array ? Buffer.from(ack).toString("utf8") : String(ack);
    const f = c.inflight.get(id);
    if (f === undefined) return;
    c.inflight.delete(id);
    c.unconfirmed.delete(f);
    this.counters.acked++;
    this.delivered(f);
    if (c.retiring && c.inflight.size === 0) c.socket.end();
  }
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as { [k: string]: unknown })[k] = v;
  return out;
}
