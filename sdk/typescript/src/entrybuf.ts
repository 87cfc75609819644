/**
 * A growable buffer of concatenated [EventTime, record] entries: the payload
 * of one PackedForward frame.
 *
 * Hot path. The record is written straight into the buffer for the plain JSON
 * kinds of values (objects, arrays, strings, numbers, booleans, null and
 * undefined), in exactly the bytes @msgpack/msgpack produces (smallest int
 * forms, float64, str, insertion-ordered keys; checked against the library
 * and the shared vectors in the tests), plus bigint (int64/uint64, which the
 * library refuses), Date (the msgpack timestamp extension, type -1, as the
 * library writes it) and Map (a msgpack map of its entries, keys of any of
 * these kinds; the library would write an empty map). Anything else
 * (Uint8Array, class instances, EventTime values inside records, cycles) is
 * handed to @msgpack/msgpack with the EventTime extension codec; a bigint
 * inside those still fails. @msgpack/msgpack
 * pays ~0.6 µs per string for TextEncoder.encodeInto on a subarray; writing
 * here with Buffer#utf8Write is what makes emit() cheap.
 */
import type { Encoder } from "@msgpack/msgpack";

const MAX_DEPTH = 100;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);
const objectProto = Object.prototype;

/** Thrown inside the fast writer when a value needs the full library. */
const BAIL = Symbol("bail");

export class EntryBuffer {
  buf: Buffer;
  len = 0;
  count = 0;

  constructor(initial = 64 * 1024) {
    this.buf = Buffer.allocUnsafe(initial);
  }

  private grow(need: number): void {
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + need + 1024));
    this.buf.copy(bigger, 0, 0, this.len);
    this.buf = bigger;
  }

  /** Append already-encoded entries. */
  appendBytes(bytes: Uint8Array, count: number): void {
    if (this.len + bytes.length > this.buf.length) this.grow(bytes.length);
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
    this.count += count;
  }

  /**
   * Append one entry [EventTime(sec, nsec), record]; returns its byte length.
   * `fallback` encodes the record when it holds values the fast path does not write.
   */
  appendEntry(sec: number, nsec: number, record: unknown, fallback: Encoder): number {
    const start = this.len;
    if (start + 64 > this.buf.length) this.grow(64);
    const b = this.buf;
    b[start] = 0x92;
    b[start + 1] = 0xd7;
    b[start + 2] = 0x00;
    b[start + 3] = sec >>> 24;
    b[start + 4] = (sec >>> 16) & 0xff;
    b[start + 5] = (sec >>> 8) & 0xff;
    b[start + 6] = sec & 0xff;
    b[start + 7] = nsec >>> 24;
    b[start + 8] = (nsec >>> 16) & 0xff;
    b[start + 9] = (nsec >>> 8) & 0xff;
    b[start + 10] = nsec & 0xff;
    this.len = start + 11;
    try {
      this.value(record, 0);
    } catch (e) {
      if (e !== BAIL) {
        this.len = start;
        throw e;
      }
      // Re-encode the whole record with the library (throws for unsupported values).
      this.len = start + 11;
      try {
        const bytes = fallback.encodeSharedRef(record);
        if (this.len + bytes.length > this.buf.length) this.grow(bytes.length);
        this.buf.set(bytes, this.len);
        this.len += bytes.length;
      } catch (err) {
        this.len = start;
        throw err;
      }
    }
    this.count++;
    return this.len - start;
  }

  /** Remove the last entry (its bytes are returned as a copy). */
  takeLast(size: number): Buffer {
    const out = Buffer.from(this.buf.subarray(this.len - size, this.len));
    this.len -= size;
    this.count--;
    return out;
  }

  reset(): void {
    this.len = 0;
    this.count = 0;
  }

  private ensure(n: number): void {
    if (this.len + n > this.buf.length) this.grow(n);
  }

  private value(v: unknown, depth: number): void {
    switch (typeof v) {
      case "string":
        this.str(v);
        return;
      case "number":
        this.num(v);
        return;
      case "bigint":
        this.bigint(v);
        return;
      case "boolean":
        this.ensure(1);
        this.buf[this.len++] = v ? 0xc3 : 0xc2;
        return;
      case "undefined":
        this.ensure(1);
        this.buf[this.len++] = 0xc0;
        return;
      case "object": {
        if (v === null) {
          this.ensure(1);
          this.buf[this.len++] = 0xc0;
          return;
        }
        if (depth >= MAX_DEPTH) throw BAIL;
        if (v instanceof Date) {
          this.date(v);
          return;
        }
        if (Array.isArray(v)) {
          this.arr(v, depth + 1);
          return;
        }
        if (v instanceof Map) {
          this.mapEntries(v, depth + 1);
          return;
        }
        const proto = Object.getPrototypeOf(v);
        if (proto !== objectProto && proto !== null) throw BAIL;
        this.map(v as { [k: string]: unknown }, depth + 1);
        return;
      }
      default:
        throw BAIL;
    }
  }

  private map(o: { [k: string]: unknown }, depth: number): void {
    const keys = Object.keys(o);
    this.mapHeader(keys.length);
    for (const k of keys) {
      this.str(k);
      this.value(o[k], depth);
    }
  }

  private mapEntries(m: Map<unknown, unknown>, depth: number): void {
    this.mapHeader(m.size);
    for (const [k, v] of m) {
      this.value(k, depth);
      this.value(v, depth);
    }
  }

  private mapHeader(n: number): void {
    this.ensure(5);
    const b = this.buf;
    if (n < 16) b[this.len++] = 0x80 | n;
    else if (n < 0x10000) {
      b[this.len] = 0xde;
      b[this.len + 1] = n >>> 8;
      b[this.len + 2] = n & 0xff;
      this.len += 3;
    } else {
      b[this.len] = 0xdf;
      b.writeUInt32BE(n, this.len + 1);
      this.len += 5;
    }
  }

  private arr(a: unknown[], depth: number): void {
    const n = a.length;
    this.ensure(5);
    const b = this.buf;
    if (n < 16) b[this.len++] = 0x90 | n;
    else if (n < 0x10000) {
      b[this.len] = 0xdc;
      b[this.len + 1] = n >>> 8;
      b[this.len + 2] = n & 0xff;
      this.len += 3;
    } else {
      b[this.len] = 0xdd;
      b.writeUInt32BE(n, this.len + 1);
      this.len += 5;
    }
    for (let i = 0; i < n; i++) this.value(a[i], depth);
  }

  private str(s: string): void {
    const n = s.length;
    if (n < 32) {
      // Short strings: ASCII inline; anything else takes the general path.
      this.ensure(1 + n);
      const b = this.buf;
      const p = this.len;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c >= 0x80) break;
        b[p + 1 + i] = c;
      }
      if (i === n) {
        b[p] = 0xa0 | n;
        this.len = p + 1 + n;
        return;
      }
    }
    const bytes = Buffer.byteLength(s, "utf8");
    this.ensure(5 + bytes);
    const b = this.buf;
    let p = this.len;
    if (bytes < 32) b[p++] = 0xa0 | bytes;
    else if (bytes < 0x100) {
      b[p++] = 0xd9;
      b[p++] = bytes;
    } else if (bytes < 0x10000) {
      b[p++] = 0xda;
      b[p++] = bytes >>> 8;
      b[p++] = bytes & 0xff;
    } else {
      b[p++] = 0xdb;
      b.writeUInt32BE(bytes, p);
      p += 4;
    }
    this.len = p + b.utf8Write(s, p, bytes);
  }

  /** A bigint as msgpack int64/uint64 (the smallest form that holds it); outside both: RangeError. */
  private bigint(v: bigint): void {
    if (v >= -MAX_SAFE && v <= MAX_SAFE) {
      this.num(Number(v));
      return;
    }
    this.ensure(9);
    const b = this.buf;
    if (v > 0n && v <= U64_MAX) {
      b[this.len] = 0xcf;
      b.writeBigUInt64BE(v, this.len + 1);
    } else if (v < 0n && v >= I64_MIN) {
      b[this.len] = 0xd3;
      b.writeBigInt64BE(v, this.len + 1);
    } else {
      throw new RangeError(`bigint ${v} does not fit in a 64-bit integer`);
    }
    this.len += 9;
  }

  /**
   * A Date as the msgpack timestamp extension (type -1), in its smallest form:
   * 32-bit seconds, 64-bit (30-bit nanoseconds + 34-bit seconds) or 96-bit.
   */
  private date(d: Date): void {
    const ms = d.getTime();
    if (!Number.isFinite(ms)) throw new RangeError("invalid Date");
    const sec = Math.floor(ms / 1000);
    const nsec = (ms - sec * 1000) * 1_000_000;
    this.ensure(15);
    const b = this.buf;
    let p = this.len;
    if (sec >= 0 && sec < 2 ** 34) {
      if (nsec === 0 && sec < 2 ** 32) {
        b[p++] = 0xd6;
        b[p++] = 0xff;
        b.writeUInt32BE(sec, p);
        p += 4;
      } else {
        b[p++] = 0xd7;
        b[p++] = 0xff;
        // upper 32 bits: nsec << 2 | the top 2 bits of the 34-bit seconds
        b.writeUInt32BE(nsec * 4 + Math.floor(sec / 2 ** 32), p);
        b.writeUInt32BE(sec >>> 0, p + 4);
        p += 8;
      }
    } else {
      b[p++] = 0xc7;
      b[p++] = 12;
      b[p++] = 0xff;
      b.writeUInt32BE(nsec, p);
      b.writeBigInt64BE(BigInt(sec), p + 4);
      p += 12;
    }
    this.len = p;
  }

  private num(v: number): void {
    this.ensure(9);
    const b = this.buf;
    let p = this.len;
    if (Number.isSafeInteger(v)) {
      if (v >= 0) {
        if (v < 0x80) b[p++] = v;
        else if (v < 0x100) {
          b[p++] = 0xcc;
          b[p++] = v;
        } else if (v < 0x10000) {
          b[p++] = 0xcd;
          b[p++] = v >>> 8;
          b[p++] = v & 0xff;
        } else if (v < 0x100000000) {
          b[p++] = 0xce;
          b.writeUInt32BE(v, p);
          p += 4;
        } else {
          b[p++] = 0xcf;
          b.writeUInt32BE(Math.floor(v / 0x100000000), p);
          b.writeUInt32BE(v >>> 0, p + 4);
          p += 8;
        }
      } else if (v >= -0x20) b[p++] = 0xe0 | (v + 0x20);
      else if (v >= -0x80) {
        b[p++] = 0xd0;
        b[p++] = v & 0xff;
      } else if (v >= -0x8000) {
        b[p++] = 0xd1;
        b[p++] = (v >> 8) & 0xff;
        b[p++] = v & 0xff;
      } else if (v >= -0x80000000) {
        b[p++] = 0xd2;
        b.writeInt32BE(v, p);
        p += 4;
      } else {
        b[p++] = 0xd3;
        const hi = Math.floor(v / 0x100000000);
        b.writeInt32BE(hi, p);
        b.writeUInt32BE(v - hi * 0x100000000, p + 4);
        p += 8;
      }
    } else {
      b[p++] = 0xcb;
      b.writeDoubleBE(v, p);
      p += 8;
    }
    this.len = p;
  }
}

declare module "node:buffer" {
  interface Buffer {
    /** Node's internal UTF-8 writer (stable since v0.x; Buffer#write calls it after argument checks). */
    utf8Write(s: string, offset: number, length: number): number;
  }
}
