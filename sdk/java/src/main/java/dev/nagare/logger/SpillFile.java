package dev.nagare.logger;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.TreeSet;
import java.util.zip.CRC32;

/**
 * An append-only file of sealed chunks, read back in order. Each record: magic "NGS1", u16 tag
 * length, tag, u32 event count, u32 data length, data, u32 CRC-32 of (tag, count, data). A side
 * file {@code <path>.offset} holds the position up to which every record was delivered, so a new
 * logger on the same path resumes there; a torn record at the end is cut off when opening. When
 * everything has been delivered, the file is truncated to zero.
 */
final class SpillFile implements AutoCloseable {
  private static final int MAGIC = 0x4E475331; // "NGS1"
  private static final int FIXED = 4 + 2 + 4 + 4 + 4;

  final Path path;
  private final Path offsetPath;
  private final long limit;
  private FileChannel ch;
  private final FileChannel offCh;
  private long writePos;
  private long readPos;
  private long recoveredEvents;
  private final TreeSet<Long> outstanding = new TreeSet<>();
  private final ByteBuffer offBuf = ByteBuffer.allocate(8);

  SpillFile(Path path, long limit) throws IOException {
    this.path = path;
    this.offsetPath = path.resolveSibling(path.getFileName() + ".offset");
    this.limit = limit;
    Path dir = path.toAbsolutePath().getParent();
    if (dir != null) {
      Files.createDirectories(dir);
    }
    ch =
        FileChannel.open(
            path, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE);
    offCh =
        FileChannel.open(
            offsetPath,
            StandardOpenOption.CREATE,
            StandardOpenOption.READ,
            StandardOpenOption.WRITE);
    recover();
  }

  private void recover() throws IOException {
    long size = ch.size();
    long start = 0;
    if (offCh.size() >= 8) {
      ByteBuffer b = ByteBuffer.allocate(8);
      offCh.read(b, 0);
      b.flip();
      start = b.getLong();
      if (start < 0 || start > size) {
        start = 0;
      }
    }
    long pos = start;
    long events = 0;
    while (pos < size) {
      Record r = readAt(pos, size);
      if (r == null) {
        break;
      }
      events += r.count;
      pos = r.next;
    }
    if (pos < size) {
      ch.truncate(pos);
    }
    readPos = start;
    writePos = pos;
    recoveredEvents = events;
    if (readPos == writePos) {
      reset();
    }
  }

  /** Events found in the file when it was opened (left by an earlier logger). */
  synchronized long recoveredEvents() {
    return recoveredEvents;
  }

  synchronized boolean hasUnread() {
    return readPos < writePos;
  }

  synchronized boolean hasPending() {
    return readPos < writePos || !outstanding.isEmpty();
  }

  /** Appends a chunk; false when the size limit would be passed. */
  synchronized boolean append(Chunk c) throws IOException {
    if (writePos + recordLength(c) > limit) {
      return false;
    }
    writePos = writeRecord(ch, writePos, c);
    return true;
  }

  private static long recordLength(Chunk c) {
    return FIXED + c.tagBytes.length + (c.end - c.start);
  }

  private static long writeRecord(FileChannel out, long pos, Chunk c) throws IOException {
    int dataLen = c.end - c.start;
    ByteBuffer head = ByteBuffer.allocate(4 + 2 + c.tagBytes.length + 4 + 4);
    head.putInt(MAGIC).putShort((short) c.tagBytes.length).put(c.tagBytes);
    head.putInt(c.count).putInt(dataLen).flip();
    CRC32 crc = new CRC32();
    crc.update(c.tagBytes);
    crc.update(head.array(), 6 + c.tagBytes.length, 4);
    crc.update(c.buf, c.start, dataLen);
    ByteBuffer tail = ByteBuffer.allocate(4).putInt((int) crc.getValue()).flip();
    ByteBuffer[] parts = {head, ByteBuffer.wrap(c.buf, c.start, dataLen), tail};
    for (ByteBuffer p : parts) {
      while (p.hasRemaining()) {
        pos += out.write(p, pos);
      }
    }
    return pos;
  }

  /**
   * Rewrites the file as (before, the unread records, after), fsync'd, so events still in memory
   * keep their order relative to those already in the file (at close, and when an outage starts).
   * Chunks in {@code before} that were read from this file (outstanding) become unread records
   * again. Returns the events that did not fit.
   */
  synchronized long rewrite(List<Chunk> before, List<Chunk> after) throws IOException {
    Path tmp = path.resolveSibling(path.getFileName() + ".tmp");
    long lost = 0;
    long pos = 0;
    try (FileChannel out =
        FileChannel.open(
            tmp,
            StandardOpenOption.CREATE,
            StandardOpenOption.TRUNCATE_EXISTING,
            StandardOpenOption.WRITE)) {
      long unread = writePos - readPos;
      for (Chunk c : before) {
        if (pos + recordLength(c) + unread > limit) {
          lost += c.count;
        } else {
          pos = writeRecord(out, pos, c);
        }
      }
      long from = readPos;
      while (from < writePos) {
        out.position(pos);
        long n = ch.transferTo(from, writePos - from, out);
        if (n <= 0) {
          throw new IOException("could not copy the spill file");
        }
        from += n;
        pos += n;
      }
      for (Chunk c : after) {
        if (pos + recordLength(c) > limit) {
          lost += c.count;
        } else {
          pos = writeRecord(out, pos, c);
        }
      }
      out.force(false);
    }
    // The offset belongs to the old file: cleared first, so a crash in between resends delivered
    // records (duplicates) instead of skipping undelivered ones.
    offCh.truncate(0);
    offCh.force(false);
    Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    ch.close();
    ch =
        FileChannel.open(
            path, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE);
    outstanding.clear();
    readPos = 0;
    writePos = pos;
    return lost;
  }

  private record Record(String tag, byte[] tagBytes, int count, byte[] data, long next) {}

  private Record readAt(long pos, long size) throws IOException {
    if (size - pos < FIXED) {
      return null;
    }
    ByteBuffer h = ByteBuffer.allocate(6);
    readFully(h, pos);
    h.flip();
    if (h.getInt() != MAGIC) {
      return null;
    }
    int tagLen = h.getShort() & 0xFFFF;
    if (size - pos < FIXED + tagLen) {
      return null;
    }
    ByteBuffer h2 = ByteBuffer.allocate(tagLen + 8);
    readFully(h2, pos + 6);
    h2.flip();
    byte[] tag = new byte[tagLen];
    h2.get(tag);
    int count = h2.getInt();
    int dataLen = h2.getInt();
    if (dataLen < 0 || size - pos < (long) FIXED + tagLen + dataLen) {
      return null;
    }
    ByteBuffer d = ByteBuffer.allocate(dataLen + 4);
    readFully(d, pos + 6 + tagLen + 8);
    d.flip();
    byte[] data = new byte[dataLen];
    d.get(data);
    int want = d.getInt();
    CRC32 crc = new CRC32();
    crc.update(tag);
    crc.update(h2.array(), tagLen, 4);
    crc.update(data);
    if ((int) crc.getValue() != want) {
      return null;
    }
    return new Record(
        new String(tag, StandardCharsets.UTF_8), tag, count, data, pos + FIXED + tagLen + dataLen);
  }

  private void readFully(ByteBuffer b, long pos) throws IOException {
    while (b.hasRemaining()) {
      int n = ch.read(b, pos);
      if (n < 0) {
        throw new IOException("unexpected end of spill file");
      }
      pos += n;
    }
  }

  /** Reads the next unread chunk, or null. The chunk stays outstanding until completed. */
  synchronized Chunk readNext() throws IOException {
    if (readPos >= writePos) {
      return null;
    }
    Record r = readAt(readPos, writePos);
    if (r == null) {
      // Corrupt in the middle: skip the rest rather than loop forever.
      long lost = writePos - readPos;
      readPos = writePos;
      commit();
      throw new IOException("spill file corrupt at " + readPos + ", skipped " + lost + " bytes");
    }
    Chunk c = new Chunk(r.tag, r.tagBytes, r.data, r.count);
    c.spillStart = readPos;
    outstanding.add(readPos);
    readPos = r.next;
    return c;
  }

  /** Marks a chunk read from this file as delivered. */
  synchronized void complete(Chunk c) throws IOException {
    outstanding.remove(c.spillStart);
    commit();
  }

  private void commit() throws IOException {
    if (readPos == writePos && outstanding.isEmpty()) {
      reset();
      return;
    }
    long committed = outstanding.isEmpty() ? readPos : outstanding.first();
    offBuf.clear();
    offBuf.putLong(committed).flip();
    while (offBuf.hasRemaining()) {
      offCh.write(offBuf, offBuf.position());
    }
  }

  private void reset() throws IOException {
    ch.truncate(0);
    offCh.truncate(0);
    readPos = 0;
    writePos = 0;
  }

  /** fsync: what was appended survives a machine crash too. */
  synchronized void sync() throws IOException {
    ch.force(false);
  }

  synchronized long sizeBytes() {
    return writePos;
  }

  @Override
  public synchronized void close() throws IOException {
    try {
      ch.force(false);
      offCh.force(false);
    } finally {
      ch.close();
      offCh.close();
    }
  }
}
