package dev.nagare.logger;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.ValueType;

/**
 * Encoder and decoder for the four frame modes of the Fluentd forward protocol v1 (Message,
 * Forward, PackedForward, CompressedPackedForward). The client uses the packed encoding; the other
 * modes are here for tests, tools and servers.
 *
 * <p>Records are {@code Map}s written in their iteration order. Values map to msgpack as follows:
 * {@code null} → nil, Boolean → bool, Byte/Short/Integer/Long/BigInteger → the smallest int form,
 * Float/Double → float64, CharSequence/Character/Enum → str, byte[] → bin, Map → map,
 * Collection/Object[] → array, {@link EventTime} → EventTime, Instant → ISO-8601 str, anything else
 * → its {@code toString()} as str.
 */
public final class Forward {
  private Forward() {}

  /** The frame modes of forward protocol v1. */
  public enum Mode {
    MESSAGE,
    FORWARD,
    PACKED,
    COMPRESSED
  }

  /** One event: its time and its record. */
  public record Entry(EventTime time, Map<String, Object> record) {}

  /**
   * A decoded frame: tag, mode, the entries, the uncompressed concatenated entry bytes (for packed
   * and compressed modes; re-encoded for message and forward modes), and the option map.
   */
  public record Frame(
      String tag,
      Mode mode,
      List<Entry> entries,
      byte[] entriesBytes,
      Map<String, Object> options) {
    public String chunk() {
      Object c = options.get("chunk");
      return c == null ? null : c.toString();
    }
  }

  // ---------------------------------------------------------------- values

  /** Writes one Java value as msgpack (the same bytes emit() writes, see {@link RecordWriter}). */
  public static void packValue(MessagePacker p, Object v) throws IOException {
    ByteSink s = new ByteSink(64);
    RecordWriter.value(s, v);
    p.writePayload(s.buf, 0, s.len);
  }

  static void packMap(MessagePacker p, Map<?, ?> m) throws IOException {
    ByteSink s = new ByteSink(64);
    RecordWriter.map(s, m);
    p.writePayload(s.buf, 0, s.len);
  }

  /** Reads one msgpack value as a Java value (see the class comment for the mapping back). */
  public static Object unpackValue(MessageUnpacker u) throws IOException {
    MessageFormat f = u.getNextFormat();
    ValueType t = f.getValueType();
    switch (t) {
      case NIL:
        u.unpackNil();
        return null;
      case BOOLEAN:
        return u.unpackBoolean();
      case INTEGER:
        if (f == MessageFormat.UINT64) {
          BigInteger bi = u.unpackBigInteger();
          return bi.bitLength() <= 63 ? (Object) bi.longValue() : bi;
        }
        return u.unpackLong();
      case FLOAT:
        return u.unpackDouble();
      case STRING:
        return u.unpackString();
      case BINARY:
        {
          int n = u.unpackBinaryHeader();
          return u.readPayload(n);
        }
      case ARRAY:
        {
          int n = u.unpackArrayHeader();
          List<Object> list = new ArrayList<>(n);
          for (int i = 0; i < n; i++) {
            list.add(unpackValue(u));
          }
          return list;
        }
      case MAP:
        {
          int n = u.unpackMapHeader();
          Map<String, Object> map = new LinkedHashMap<>();
          for (int i = 0; i < n; i++) {
            Object k = unpackValue(u);
            map.put(
                k instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : String.valueOf(k),
                unpackValue(u));
          }
          return map;
        }
      case EXTENSION:
        {
          var h = u.unpackExtensionTypeHeader();
          byte[] payload = u.readPayload(h.getLength());
          if (h.getType() == 0 && payload.length == 8) {
            long sec = readU32(payload, 0);
            long nsec = readU32(payload, 4);
            return new EventTime(sec, nsec);
          }
          return payload;
        }
      default:
        throw new IOException("unexpected msgpack type " + t);
    }
  }

  private static long readU32(byte[] b, int off) {
    return ((b[off] & 0xFFL) << 24)
        | ((b[off + 1] & 0xFFL) << 16)
        | ((b[off + 2] & 0xFFL) << 8)
        | (b[off + 3] & 0xFFL);
  }

  // ---------------------------------------------------------------- encoding

  /** Writes a msgpack value into the sink; see {@link #pack}. */
  @FunctionalInterface
  interface Body {
    void write(ByteSink sink, MessagePacker p) throws IOException;
  }

  /** Runs body on a fresh sink of the given capacity, flushes, and returns the bytes. */
  static byte[] pack(int capacity, Body body) {
    ByteSink sink = new ByteSink(capacity);
    MessagePacker p = MessagePack.newDefaultPacker(sink);
    try {
      body.write(sink, p);
      p.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return sink.toByteArray();
  }

  /** The trailing {@code {"chunk": id}} option map, when chunk is not null. */
  private static void packChunkOption(MessagePacker p, String chunk) throws IOException {
    if (chunk != null) {
      p.packMapHeader(1);
      p.packString("chunk");
      p.packString(chunk);
    }
  }

  /** The msgpack array {@code [EventTime, record]}. */
  public static byte[] encodeEntry(EventTime time, Map<String, ?> record) {
    return pack(64, (sink, p) -> writeEntry(sink, time.seconds(), time.nanos(), record));
  }

  /**
   * Appends {@code [EventTime, record]} to the sink, without a packer (a packer writing into the
   * same sink must be flushed before).
   */
  static void writeEntry(ByteSink sink, long sec, long nsec, Map<String, ?> record) {
    sink.ensure(11);
    sink.buf[sink.len] = (byte) 0x92;
    EventTime.write(sink.buf, sink.len + 1, sec, nsec);
    sink.len += 11;
    if (record == null) {
      sink.put((byte) 0x80);
    } else {
      RecordWriter.map(sink, record);
    }
  }

  /** Concatenated entries: the payload of a PackedForward frame. */
  public static byte[] encodeEntries(List<Entry> entries) {
    return pack(
        256,
        (sink, p) -> {
          for (Entry e : entries) {
            writeEntry(sink, e.time().seconds(), e.time().nanos(), e.record());
          }
        });
  }

  /** {@code [tag, time, record]} plus {@code {"chunk": id}} when chunk is not null. */
  public static byte[] encodeMessage(String tag, Entry entry, String chunk) {
    return pack(
        256,
        (sink, p) -> {
          p.packArrayHeader(chunk == null ? 3 : 4);
          p.packString(tag);
          packValue(p, entry.time());
          packMap(p, entry.record());
          packChunkOption(p, chunk);
        });
  }

  /** {@code [tag, [[time, record], ...]]} plus {@code {"chunk": id}} when chunk is not null. */
  public static byte[] encodeForward(String tag, List<Entry> entries, String chunk) {
    return pack(
        256,
        (sink, p) -> {
          p.packArrayHeader(chunk == null ? 2 : 3);
          p.packString(tag);
          p.packArrayHeader(entries.size());
          p.flush();
          for (Entry e : entries) {
            writeEntry(sink, e.time().seconds(), e.time().nanos(), e.record());
          }
          packChunkOption(p, chunk);
        });
  }

  /** {@code [tag, bin(entries), {"size": count[, "chunk": id]}]}. */
  public static byte[] encodePacked(String tag, byte[] entries, int count, String chunk) {
    return packedFrame(tag, entries, 0, entries.length, count, chunk, false);
  }

  /** {@code [tag, bin(gzip(entries)), {"size": count[, "chunk": id], "compressed": "gzip"}]}. */
  public static byte[] encodeCompressed(String tag, byte[] entries, int count, String chunk) {
    byte[] z = gzip(entries, 0, entries.length);
    return packedFrame(tag, z, 0, z.length, count, chunk, true);
  }

  static byte[] packedFrame(
      String tag, byte[] data, int off, int len, int count, String chunk, boolean compressed) {
    byte[] tagBytes = tag.getBytes(StandardCharsets.UTF_8);
    byte[] head = new byte[headerLength(tagBytes.length, len)];
    writeHeader(head, 0, tagBytes, len);
    byte[] trailer = trailer(count, chunk, compressed);
    byte[] out = new byte[head.length + len + trailer.length];
    System.arraycopy(head, 0, out, 0, head.length);
    System.arraycopy(data, off, out, head.length, len);
    System.arraycopy(trailer, 0, out, head.length + len, trailer.length);
    return out;
  }

  /** Length of {@code 93 <str tag> <bin header>}. */
  static int headerLength(int tagLen, int dataLen) {
    return 1 + strHeaderLength(tagLen) + tagLen + binHeaderLength(dataLen);
  }

  static int strHeaderLength(int n) {
    return n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5;
  }

  static int binHeaderLength(int n) {
    return n < 256 ? 2 : n < 65536 ? 3 : 5;
  }

  /** Writes {@code 93 <str tag> <bin header>} at off; returns the offset after it. */
  static int writeHeader(byte[] b, int off, byte[] tag, int dataLen) {
    b[off++] = (byte) 0x93;
    int n = tag.length;
    if (n < 32) {
      b[off++] = (byte) (0xa0 | n);
    } else if (n < 256) {
      b[off++] = (byte) 0xd9;
      b[off++] = (byte) n;
    } else if (n < 65536) {
      b[off++] = (byte) 0xda;
      b[off++] = (byte) (n >>> 8);
      b[off++] = (byte) n;
    } else {
      b[off++] = (byte) 0xdb;
      off = putInt(b, off, n);
    }
    System.arraycopy(tag, 0, b, off, n);
    off += n;
    if (dataLen < 256) {
      b[off++] = (byte) 0xc4;
      b[off++] = (byte) dataLen;
    } else if (dataLen < 65536) {
      b[off++] = (byte) 0xc5;
      b[off++] = (byte) (dataLen >>> 8);
      b[off++] = (byte) dataLen;
    } else {
      b[off++] = (byte) 0xc6;
      off = putInt(b, off, dataLen);
    }
    return off;
  }

  private static int putInt(byte[] b, int off, int v) {
    b[off] = (byte) (v >>> 24);
    b[off + 1] = (byte) (v >>> 16);
    b[off + 2] = (byte) (v >>> 8);
    b[off + 3] = (byte) v;
    return off + 4;
  }

  /** The option map: {@code {"size": n[, "chunk": id][, "compressed": "gzip"]}}. */
  static byte[] trailer(int count, String chunk, boolean compressed) {
    return pack(
        64,
        (sink, p) -> {
          p.packMapHeader(1 + (chunk != null ? 1 : 0) + (compressed ? 1 : 0));
          p.packString("size");
          p.packInt(count);
          if (chunk != null) {
            p.packString("chunk");
            p.packString(chunk);
          }
          if (compressed) {
            p.packString("compressed");
            p.packString("gzip");
          }
        });
  }

  public static byte[] gzip(byte[] data, int off, int len) {
    ByteArrayOutputStream bos = new ByteArrayOutputStream(Math.max(64, len / 4));
    try (GZIPOutputStream gz = new GZIPOutputStream(bos, 8192)) {
      gz.write(data, off, len);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bos.toByteArray();
  }

  public static byte[] gunzip(byte[] data) throws IOException {
    try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(data))) {
      return in.readAllBytes();
    }
  }

  // ---------------------------------------------------------------- decoding

  /** Decodes exactly one frame from the bytes. */
  public static Frame decodeFrame(byte[] bytes) throws IOException {
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(bytes)) {
      Frame f = readFrame(u);
      if (u.hasNext()) {
        throw new IOException("trailing bytes after frame");
      }
      return f;
    }
  }

  /** Reads one frame from a stream of msgpack values. */
  @SuppressWarnings("unchecked")
  public static Frame readFrame(MessageUnpacker u) throws IOException {
    int n = u.unpackArrayHeader();
    if (n < 2 || n > 4) {
      throw new IOException("frame is an array of " + n + " elements");
    }
    String tag = u.unpackString();
    ValueType t = u.getNextFormat().getValueType();
    Map<String, Object> options = Map.of();
    switch (t) {
      case INTEGER:
      case EXTENSION:
        {
          if (n < 3) {
            throw new IOException("message frame without record");
          }
          EventTime time = readTime(u);
          Object rec = unpackValue(u);
          if (!(rec instanceof Map)) {
            throw new IOException("record is not a map");
          }
          if (n == 4) {
            options = readOptions(u);
          }
          Entry e = new Entry(time, (Map<String, Object>) rec);
          return new Frame(tag, Mode.MESSAGE, List.of(e), encodeEntries(List.of(e)), options);
        }
      case ARRAY:
        {
          int m = u.unpackArrayHeader();
          List<Entry> entries = new ArrayList<>(m);
          for (int i = 0; i < m; i++) {
            entries.add(readEntry(u));
          }
          if (n >= 3) {
            options = readOptions(u);
          }
          return new Frame(tag, Mode.FORWARD, entries, encodeEntries(entries), options);
        }
      case BINARY:
      case STRING:
        {
          int len = t == ValueType.BINARY ? u.unpackBinaryHeader() : u.unpackRawStringHeader();
          byte[] data = u.readPayload(len);
          if (n >= 3) {
            options = readOptions(u);
          }
          Mode mode = Mode.PACKED;
          if ("gzip".equals(options.get("compressed"))) {
            data = gunzip(data);
            mode = Mode.COMPRESSED;
          }
          List<Entry> entries = decodeEntries(data);
          Object size = options.get("size");
          if (size != null && ((Number) size).longValue() != entries.size()) {
            throw new IOException("size option " + size + " but " + entries.size() + " entries");
          }
          return new Frame(tag, mode, entries, data, options);
        }
      default:
        throw new IOException("unexpected frame element type " + t);
    }
  }

  private static Map<String, Object> readOptions(MessageUnpacker u) throws IOException {
    Object o = unpackValue(u);
    if (o == null) {
      return Map.of();
    }
    if (!(o instanceof Map)) {
      throw new IOException("option is not a map");
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> m = (Map<String, Object>) o;
    return m;
  }

  private static EventTime readTime(MessageUnpacker u) throws IOException {
    Object t = unpackValue(u);
    if (t instanceof EventTime et) {
      return et;
    }
    if (t instanceof Long l) {
      return new EventTime(l, 0);
    }
    throw new IOException("bad time value " + t);
  }

  @SuppressWarnings("unchecked")
  private static Entry readEntry(MessageUnpacker u) throws IOException {
    int n = u.unpackArrayHeader();
    if (n != 2) {
      throw new IOException("entry is an array of " + n + " elements");
    }
    EventTime time = readTime(u);
    Object rec = unpackValue(u);
    if (!(rec instanceof Map)) {
      throw new IOException("record is not a map");
    }
    return new Entry(time, (Map<String, Object>) rec);
  }

  /** Decodes concatenated {@code [time, record]} entries. */
  public static List<Entry> decodeEntries(byte[] data) throws IOException {
    List<Entry> out = new ArrayList<>();
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(data)) {
      while (u.hasNext()) {
        out.add(readEntry(u));
      }
    }
    return out;
  }

  static boolean equalBytes(byte[] a, byte[] b) {
    return Arrays.equals(a, b);
  }
}
