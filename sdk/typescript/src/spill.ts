/**
 * Disk spill file: an append-only file of records, read back in order.
 *
 * Record layout: u32 BE record length (bytes after this field), u16 BE tag
 * length, tag (UTF-8), u32 BE entry count, concatenated msgpack entries.
 * Records are written with synchronous I/O (a synchronous append keeps emit()
 * ordering exact) and fsync'd by the client on a short timer (sync()).
 */
import * as fs from "node:fs";
import * as path from "node:path";

export interface SpillRecord {
  tag: string;
  count: number;
  entries: Buffer;
}

const HEADER = 4 + 2 + 4;

export class SpillFile {
  readonly path: string;
  readonly limit: number;
  private fd: number;
  private readPos = 0;
  private writePos: number;
  private readBuf: Buffer = Buffer.alloc(0);
  /** Events currently stored in the file and not yet read back. */
  pendingEvents = 0;
  /** Events appended since the last fsync. */
  unsyncedEvents = 0;

  constructor(filePath: string, limitBytes: number) {
    this.path = filePath;
    this.limit = limitBytes;
    fs.mkdirSync(path.dirname(filePath), { recursive: true });
    this.fd = fs.openSync(filePath, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
    this.writePos = fs.fstatSync(this.fd).size;
    // Count what a previous process left behind, and drop a torn last record.
    let pos = 0;
    const head = Buffer.alloc(HEADER);
    while (pos + HEADER <= this.writePos) {
      fs.readSync(this.fd, head, 0, HEADER, pos);
      const len = head.readUInt32BE(0);
      if (pos + 4 + len > this.writePos || len < HEADER - 4) break;
      this.pendingEvents += this.countAt(pos);
      pos += 4 + len;
    }
    if (pos !== this.writePos) {
      fs.ftruncateSync(this.fd, pos);
      this.writePos = pos;
    }
  }

  private countAt(pos: number): number {
    const h = Buffer.alloc(6);
    fs.readSync(this.fd, h, 0, 6, pos);
    const tagLen = h.readUInt16BE(4);
    const c = Buffer.alloc(4);
    fs.readSync(this.fd, c, 0, 4, pos + 6 + tagLen);
    return c.readUInt32BE(0);
  }

  /** Bytes in the file not yet read back. */
  get pendingBytes(): number {
    return this.writePos - this.readPos;
  }

  get empty(): boolean {
    return this.writePos === this.readPos;
  }

  /** Append a record; false when the size limit would be exceeded. */
  append(tag: string, count: number, entries: Uint8Array): boolean {
    const rec = encodeRecord(tag, count, entries);
    if (this.writePos + rec.length > this.limit) return false;
    fs.writeSync(this.fd, rec, 0, rec.length, this.writePos);
    this.writePos += rec.length;
    this.pendingEvents += count;
    this.unsyncedEvents += count;
    return true;
  }

  /** Events in the file, not yet read back, and fsync'd. */
  get durableEvents(): number {
    return Math.max(0, this.pendingEvents - this.unsyncedEvents);
  }

  /** fsync; returns the number of events it made durable. */
  sync(): number {
    const n = this.unsyncedEvents;
    if (n === 0) return 0;
    fs.fsyncSync(this.fd);
    this.unsyncedEvents = 0;
    return n;
  }

  /**
   * Put records in front of what the file holds (they are older), through a
   * new file that is fsync'd and renamed over this one. Returns the events it
   * made durable (the new ones and those appended since the last fsync), or
   * undefined, and nothing changed, when the size limit would be exceeded.
   */
  prepend(records: SpillRecord[]): number | undefined {
    const restLen = this.writePos - this.readPos;
    const encoded = records.map((r) => encodeRecord(r.tag, r.count, r.entries));
    const total = encoded.reduce((n, b) => n + b.length, restLen);
    if (total > this.limit) return undefined;
    const rest = Buffer.allocUnsafe(restLen);
    fs.readSync(this.fd, rest, 0, restLen, this.readPos);
    const tmp = `${this.path}.tmp`;
    const fd = fs.openSync(tmp, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_TRUNC, 0o600);
    try {
      let pos = 0;
      for (const b of [...encoded, rest]) {
        fs.writeSync(fd, b, 0, b.length, pos);
        pos += b.length;
      }
      fs.fsyncSync(fd);
      fs.renameSync(tmp, this.path);
    } catch (e) {
      fs.closeSync(fd);
      fs.rmSync(tmp, { force: true });
      throw e;
    }
    fs.closeSync(this.fd);
    this.fd = fd;
    this.readPos = 0;
    this.writePos = total;
    const added = records.reduce((n, r) => n + r.count, 0);
    this.pendingEvents += added;
    const durable = added + this.unsyncedEvents;
    this.unsyncedEvents = 0;
    return durable;
  }

  /** Read the next record in order, or undefined when the file is drained. */
  next(): SpillRecord | undefined {
    if (this.readPos >= this.writePos) return undefined;
    const head = Buffer.alloc(4);
    fs.readSync(this.fd, head, 0, 4, this.readPos);
    const len = head.readUInt32BE(0);
    if (this.readBuf.length < len) this.readBuf = Buffer.allocUnsafe(Math.max(len, 65536));
    fs.readSync(this.fd, this.readBuf, 0, len, this.readPos + 4);
    const tagLen = this.readBuf.readUInt16BE(0);
    const tag = this.readBuf.toString("utf8", 2, 2 + tagLen);
    const count = this.readBuf.readUInt32BE(2 + tagLen);
    const entries = Buffer.from(this.readBuf.subarray(6 + tagLen, len));
    this.readPos += 4 + len;
    this.pendingEvents -= count;
    if (this.readPos >= this.writePos) this.reset();
    return { tag, count, entries };
  }

  /** Peek at the size of the next record (its entries), to check room before reading it. */
  nextSize(): number {
    if (this.readPos >= this.writePos) return 0;
    const head = Buffer.alloc(4);
    fs.readSync(this.fd, head, 0, 4, this.readPos);
    return head.readUInt32BE(0);
  }

  private reset(): void {
    fs.ftruncateSync(this.fd, 0);
    this.readPos = 0;
    this.writePos = 0;
    this.pendingEvents = 0;
    this.unsyncedEvents = 0;
  }

  close(): void {
    try {
      fs.closeSync(this.fd);
    } catch {
      // already closed
    }
  }
}

function encodeRecord(tag: string, count: number, entries: Uint8Array): Buffer {
  const tagBytes = Buffer.from(tag, "utf8");
  const len = 2 + tagBytes.length + 4 + entries.length;
  const rec = Buffer.allocUnsafe(4 + len);
  rec.writeUInt32BE(len, 0);
  rec.writeUInt16BE(tagBytes.length, 4);
  tagBytes.copy(rec, 6);
  rec.writeUInt32BE(count, 6 + tagBytes.length);
  rec.set(entries, 10 + tagBytes.length);
  return rec;
}
