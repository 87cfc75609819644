/**
 * Forward protocol v1 codec: EventTime (msgpack ext type 0), entries and the
 * four frame modes (Message, Forward, PackedForward, CompressedPackedForward).
 */
import { gunzipSync, gzipSync } from "node:zlib";
import { Decoder, Encoder, ExtensionCodec } from "@msgpack/msgpack";

/** Forward EventTime: seconds and nanoseconds since the Unix epoch. */
export class EventTime {
  readonly sec: number;
  readonly nsec: number;

  constructor(sec: number, nsec = 0) {
    if (!Number.isInteger(sec) || sec < 0 || sec > 0xffffffff) {
      throw new RangeError(`EventTime seconds out of range: ${sec}`);
    }
    if (!Number.isInteger(nsec) || nsec < 0 || nsec > 999_999_999) {
      throw new RangeError(`EventTime nanoseconds out of range: ${nsec}`);
    }
    this.sec = sec;
    this.nsec = nsec;
  }

  /** The current time with nanosecond resolution (wall clock + monotonic offset). */
  static now(): EventTime {
    const [s, ns] = now();
    return new EventTime(s, ns);
  }

  /** From a Date, from epoch milliseconds (number) or epoch nanoseconds (bigint). */
  static from(t: Date | number | bigint | EventTime): EventTime {
    if (t instanceof EventTime) return t;
    if (t instanceof Date) return EventTime.fromMillis(t.getTime());
    if (typeof t === "bigint") {
      return new EventTime(Number(t / 1_000_000_000n), Number(t % 1_000_000_000n));
    }
    return EventTime.fromMillis(t);
  }

  static fromMillis(ms: number): EventTime {
    const sec = Math.floor(ms / 1000);
    const nsec = Math.min(999_999_999, Math.round((ms - sec * 1000) * 1_000_000));
    return new EventTime(sec, nsec);
  }

  /** The 8 payload bytes of the ext: u32 BE seconds, u32 BE nanoseconds. */
  toBytes(): Uint8Array {
    const b = new Uint8Array(8);
    writeTime(b, 0, this.sec, this.nsec);
    return b;
  }

  static fromBytes(data: Uint8Array): EventTime {
    if (data.length !== 8) throw new RangeError(`EventTime ext must be 8 bytes, got ${data.length}`);
    const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
    return new EventTime(dv.getUint32(0), dv.getUint32(4));
  }

  toDate(): Date {
    return new Date(this.sec * 1000 + Math.floor(this.nsec / 1_000_000));
  }
}

function writeTime(b: Uint8Array, off: number, sec: number, nsec: number): void {
  b[off] = sec >>> 24;
  b[off + 1] = (sec >>> 16) & 0xff;
  b[off + 2] = (sec >>> 8) & 0xff;
  b[off + 3] = sec & 0xff;
  b[off + 4] = nsec >>> 24;
  b[off + 5] = (nsec >>> 16) & 0xff;
  b[off + 6] = (nsec >>> 8) & 0xff;
  b[off + 7] = nsec & 0xff;
}

// Wall clock anchored once at start, advanced by the monotonic clock
// (performance.now(), sub-microsecond), so time never steps backwards and
// consecutive events get distinct times.
const anchorMs = Date.now() - performance.now();
const anchorSec = Math.floor(anchorMs / 1000);
const anchorRemMs = anchorMs - anchorSec * 1000;

/** Seconds and nanoseconds now, written into `out` (no allocation). */
export function nowInto(out: { sec: number; nsec: number }): void {
  const ms = anchorRemMs + performance.now();
  const s = Math.floor(ms / 1000);
  let ns = Math.round((ms - s * 1000) * 1_000_000);
  if (ns > 999_999_999) ns = 999_999_999;
  out.sec = anchorSec + s;
  out.nsec = ns;
}

/** [seconds, nanoseconds] now. */
export function now(): [number, number] {
  const t = { sec: 0, nsec: 0 };
  nowInto(t);
  return [t.sec, t.nsec];
}

/** msgpack extension codec: EventTime <-> ext type 0 (fixext8). */
export const extensionCodec = new ExtensionCodec();
extensionCodec.register({
  type: 0,
  encode: (input: unknown) => (input instanceof EventTime ? input.toBytes() : null),
  decode: (data: Uint8Array) => EventTime.fromBytes(data),
});

/** Strings as str, keys in insertion order, floats as float64, smallest int forms. */
export function newEncoder(): Encoder {
  return new Encoder({ extensionCodec, initialBufferSize: 4096 });
}

export function newDecoder(rawStrings = false): Decoder {
  return new Decoder({ extensionCodec, rawStrings });
}

const encoder = newEncoder();
const decoder = newDecoder();

export type Record = { [key: string]: unknown };

export interface Entry {
  time: EventTime;
  record: Record;
}

export interface FrameOptions {
  size?: number;
  chunk?: string;
  compressed?: "gzip";
}

export type FrameMode = "message" | "forward" | "packed" | "compressed";

/** msgpack [EventTime, record]. */
export function encodeEntry(time: EventTime, record: Record): Uint8Array {
  return encoder.encode([time, record]);
}

export function encodeEntries(entries: Entry[]): Uint8Array {
  return Buffer.concat(entries.map((e) => encodeEntry(e.time, e.record)));
}

/** Option map with keys in protocol order: size, chunk, compressed. */
function optionMap(opts: FrameOptions): { [k: string]: unknown } {
  const m: { [k: string]: unknown } = {};
  if (opts.size !== undefined) m.size = opts.size;
  if (opts.chunk !== undefined) m.chunk = opts.chunk;
  if (opts.compressed !== undefined) m.compressed = opts.compressed;
  return m;
}

/** PackedForward frame from already-encoded entries: [tag, bin(entries), {size, chunk?}]. */
export function encodePackedFrame(tag: string, entries: Uint8Array, size: number, chunk?: string): Uint8Array {
  return encoder.encode([tag, entries, optionMap({ size, chunk })]);
}

export function encodeCompressedFrame(tag: string, entries: Uint8Array, size: number, chunk?: string): Uint8Array {
  return encoder.encode([tag, gzipSync(entries), optionMap({ size, chunk, compressed: "gzip" })]);
}

/** Encode a frame in any mode; `options.size` is added for packed/compressed. */
export function encodeFrame(
  mode: FrameMode,
  tag: string,
  entries: Entry[],
  options: { chunk?: string } = {},
): Uint8Array {
  switch (mode) {
    case "message": {
      if (entries.length !== 1) throw new Error("message mode takes exactly one entry");
      const e = entries[0] as Entry;
      const arr: unknown[] = [tag, e.time, e.record];
      if (options.chunk !== undefined) arr.push(optionMap(options));
      return encoder.encode(arr);
    }
    case "forward": {
      const arr: unknown[] = [tag, entries.map((e) => [e.time, e.record])];
      if (options.chunk !== undefined) arr.push(optionMap(options));
      return encoder.encode(arr);
    }
    case "packed":
      return encodePackedFrame(tag, encodeEntries(entries), entries.length, options.chunk);
    case "compressed":
      return encodeCompressedFrame(tag, encodeEntries(entries), entries.length, options.chunk);
  }
}

export interface DecodedFrame {
  mode: FrameMode;
  tag: string;
  entries: Entry[];
  options: FrameOptions;
  /** Concatenated msgpack [time, record] entries, uncompressed. */
  entriesBytes: Uint8Array;
}

function toEventTime(t: unknown): EventTime {
  if (t instanceof EventTime) return t;
  if (typeof t === "number" && Number.isInteger(t)) return new EventTime(t, 0);
  throw new TypeError(`invalid event time: ${String(t)}`);
}

function toRecord(r: unknown): Record {
  if (r === null || typeof r !== "object" || Array.isArray(r) || r instanceof Uint8Array) {
    throw new TypeError("record must be a map");
  }
  return r as Record;
}

function toOptions(o: unknown): FrameOptions {
  if (o === undefined || o === null) return {};
  if (typeof o !== "object" || Array.isArray(o)) throw new TypeError("option must be a map");
  return o as FrameOptions;
}

/** Decode concatenated [time, record] entries. */
export function decodeEntries(bytes: Uint8Array): Entry[] {
  const out: Entry[] = [];
  for (const item of decoder.decodeMulti(bytes)) {
    if (!Array.isArray(item) || item.length !== 2) throw new TypeError("entry must be [time, record]");
    out.push({ time: toEventTime(item[0]), record: toRecord(item[1]) });
  }
  return out;
}

/** Decode one forward-protocol frame given as a decoded msgpack value. */
export function decodeFrameValue(v: unknown): DecodedFrame {
  if (!Array.isArray(v) || v.length < 2 || typeof v[0] !== "string") {
    throw new TypeError("frame must be an array starting with a tag");
  }
  const tag = v[0];
  const second = v[1];
  if (second instanceof Uint8Array) {
    const options = toOptions(v[2]);
    const raw = options.compressed === "gzip" ? new Uint8Array(gunzipSync(second)) : second;
    return {
      mode: options.compressed === "gzip" ? "compressed" : "packed",
      tag,
      entries: decodeEntries(raw),
      options,
      entriesBytes: raw,
    };
  }
  if (Array.isArray(second)) {
    const entries = second.map((e: unknown) => {
      if (!Array.isArray(e) || e.length !== 2) throw new TypeError("entry must be [time, record]");
      return { time: toEventTime(e[0]), record: toRecord(e[1]) };
    });
    return {
      mode: "forward",
      tag,
      entries,
      options: toOptions(v[2]),
      entriesBytes: encodeEntries(entries),
    };
  }
  const time = toEventTime(second);
  const record = toRecord(v[2]);
  return {
    mode: "message",
    tag,
    entries: [{ time, record }],
    options: toOptions(v[3]),
    entriesBytes: encodeEntry(time, record),
  };
}

export function decodeFrame(bytes: Uint8Array): DecodedFrame {
  return decodeFrameValue(decoder.decode(bytes));
}
