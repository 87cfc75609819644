package dev.nagare.logger;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The events of one tag, as concatenated {@code [time, record]} entries: the payload of one
 * PackedForward frame. Room for the frame header is kept in front of the data so the frame is one
 * contiguous array and goes out in one write.
 */
final class Chunk {
  final String tag;
  final byte[] tagBytes;

  /** Offset where the entries start; the frame header is written just before it. */
  final int start;

  byte[] buf;
  int end;
  int count;

  // Frame, built by the sender once the chunk is sealed.
  int frameStart;
  int frameEnd;
  byte[] compressed; // whole frame when compression is on
  String chunkId;

  /** True while the chunk's bytes count against the memory limit. */
  boolean inMemory;

  /** Position of this chunk's record in the spill file, or -1. */
  long spillStart = -1;

  long sentAt;

  Chunk(String tag, int initialCapacity) {
    this(tag, tag.getBytes(StandardCharsets.UTF_8), initialCapacity, null);
  }

  /** A chunk in a recycled array when {@code reuse} is long enough, else in a new one. */
  Chunk(String tag, byte[] tagBytes, int initialCapacity, byte[] reuse) {
    this.tag = tag;
    this.tagBytes = tagBytes;
    this.start = Forward.headerLength(tagBytes.length, Integer.MAX_VALUE);
    int need = start + Math.max(64, initialCapacity);
    this.buf = reuse != null && reuse.length >= need ? reuse : new byte[need];
    this.end = start;
  }

  Chunk(String tag, byte[] tagBytes, byte[] data, int count) {
    this.tag = tag;
    this.tagBytes = tagBytes;
    this.start = Forward.headerLength(tagBytes.length, Integer.MAX_VALUE);
    this.buf = new byte[start + data.length + 64];
    System.arraycopy(data, 0, buf, start, data.length);
    this.end = start + data.length;
    this.count = count;
  }

  int size() {
    return end - start;
  }

  void append(byte[] src, int n) {
    if (end + n > buf.length) {
      buf = Arrays.copyOf(buf, Math.max(end + n, start + (buf.length - start) * 2));
    }
    System.arraycopy(src, 0, buf, end, n);
    end += n;
    count++;
  }

  /** Builds the frame (once per chunk id; a resend reuses it). */
  void buildFrame(String id, boolean compress) {
    if (compressed != null || (frameEnd > 0 && java.util.Objects.equals(id, chunkId))) {
      return;
    }
    chunkId = id;
    if (compress) {
      byte[] z = Forward.gzip(buf, start, end - start);
      compressed = Forward.packedFrame(tag, z, 0, z.length, count, id, true);
      frameStart = 0;
      frameEnd = compressed.length;
      return;
    }
    int dataLen = end - start;
    int headLen = Forward.headerLength(tagBytes.length, dataLen);
    frameStart = start - headLen;
    Forward.writeHeader(buf, frameStart, tagBytes, dataLen);
    byte[] trailer = Forward.trailer(count, id, false);
    if (end + trailer.length > buf.length) {
      buf = Arrays.copyOf(buf, end + trailer.length);
    }
    System.arraycopy(trailer, 0, buf, end, trailer.length);
    frameEnd = end + trailer.length;
  }

  byte[] frameArray() {
    return compressed != null ? compressed : buf;
  }
}
