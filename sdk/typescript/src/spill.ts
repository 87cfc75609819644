/**
 * Disk spill file: an append-only file of records, read back in order.
 *
 * Record layout: u32 BE record length (bytes after this field), u16 BE tag
 * length, tag (UTF-8), u32 BE entry count, concatenated msgpack entries.
 * Records are written with synchronous I/O: the file is only used when the
 * memory buffer is full, and a synchronous append keeps emit() ordering exact.
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
    const tagBytes = Buffer.from(tag, "utf8");
    const len = 2 + tagBytes.length + 4 + entries.length;
    if (this.writePos + 4 + len > this.limit) return false;
    const rec = Buffer.allocUnsafe(4 + len);
    rec.writeUInt32BE(len, 0);
    rec.writeUInt16BE(tagBytes.length, 4);
    tagBytes.copy(rec, 6);
    rec.writeUInt32BE(count, 6 + tagBytes.length);
    rec.set(entries, 10 + tagBytes.length);
    fs.writeSync(this.fd, rec, 0, rec.length, this.writePos);
    this.writePos += rec.length;
    this.pendingEvents += count;
    return true;
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
  }

  close(): void {
    try {
      fs.closeSync(this.fd);
    } catch {
      // already closed
    }
  }
}
