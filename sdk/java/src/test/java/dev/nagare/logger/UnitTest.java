package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Endpoint parsing, the spill file format and its recovery, values the encoder takes. */
class UnitTest {
  @TempDir Path tmp;

  @Test
  void endpoints() {
    assertEquals(Endpoint.tcp("127.0.0.1", 24224), Endpoint.parse("127.0.0.1"));
    assertEquals(Endpoint.tcp("example.com", 1234), Endpoint.parse("tcp://example.com:1234"));
    assertEquals(Endpoint.tcp("::1", 9), Endpoint.parse("[::1]:9"));
    assertEquals(Endpoint.tls("h", 24225), Endpoint.parse("tls://h:24225"));
    assertEquals(Endpoint.unix(Path.of("/run/n.sock")), Endpoint.parse("unix:///run/n.sock"));
    assertEquals("[::1]:9", Endpoint.parse("[::1]:9").toString());
    assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("h:0"));
    assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("h:x"));
    assertThrows(IllegalArgumentException.class, () -> Endpoint.parse(":1"));
  }

  /**
   * emit()'s own encoder writes what msgpack-core's default packer writes, for every boundary of
   * the int, str, bin, array and map forms and for strings that are not ASCII (the shared vectors
   * cover only some of these).
   */
  @Test
  void recordWriterMatchesMsgpackCore() throws Exception {
    List<Object> values = new java.util.ArrayList<>();
    long[] edges = {
      0,
      1,
      31,
      32,
      127,
      128,
      255,
      256,
      65535,
      65536,
      (1L << 32) - 1,
      1L << 32,
      Long.MAX_VALUE,
      -1,
      -32,
      -33,
      -128,
      -129,
      -32768,
      -32769,
      Integer.MIN_VALUE,
      Integer.MIN_VALUE - 1L,
      Long.MIN_VALUE
    };
    for (long e : edges) {
      values.add(e);
      if (e == (int) e) {
        values.add((int) e);
      }
      if (e == (short) e) {
        values.add((short) e);
      }
      if (e == (byte) e) {
        values.add((byte) e);
      }
    }
    for (int n : new int[] {0, 15, 16, 17, 31, 32, 255, 256, 65535, 65536}) {
      values.add("a".repeat(n));
      values.add("é".repeat(n)); // two UTF-8 bytes each: the header follows the byte count
      values.add(new byte[n]);
      values.add(java.util.Collections.nCopies(n, 1));
      Map<String, Object> m = new java.util.LinkedHashMap<>();
      for (int i = 0; i < Math.min(n, 70000); i++) {
        m.put("k" + i, i);
      }
      values.add(m);
    }
    values.addAll(
        Arrays.asList(
            null,
            true,
            false,
            1.5,
            -0.0,
            2.5f,
            Double.NaN,
            "日本語",
            "a\uD800b",
            "😀 x",
            new java.math.BigInteger("18446744073709551615"),
            new EventTime(1, 2),
            new Object[] {"x", 1},
            java.time.Instant.ofEpochSecond(5),
            'c'));
    for (Object v : values) {
      ByteSink expected = new ByteSink(64);
      org.msgpack.core.MessagePacker p = org.msgpack.core.MessagePack.newDefaultPacker(expected);
      if (v instanceof Long l) {
        p.packLong(l);
      } else if (v instanceof Integer i) {
        p.packInt(i);
      } else if (v instanceof Short sh) {
        p.packShort(sh);
      } else if (v instanceof Byte b) {
        p.packByte(b);
      } else if (v instanceof String str) {
        p.packString(str);
      } else if (v instanceof byte[] b) {
        p.packBinaryHeader(b.length).writePayload(b);
      } else if (v instanceof List<?> l) {
        p.packArrayHeader(l.size());
        for (Object o : l) {
          p.packInt((Integer) o);
        }
      } else if (v instanceof Map<?, ?> m) {
        p.packMapHeader(m.size());
        for (Map.Entry<?, ?> e : m.entrySet()) {
          p.packString((String) e.getKey()).packInt((Integer) e.getValue());
        }
      } else if (v == null) {
        p.packNil();
      } else if (v instanceof Boolean b) {
        p.packBoolean(b);
      } else if (v instanceof Double d) {
        p.packDouble(d);
      } else if (v instanceof Float f) {
        p.packDouble(f.doubleValue());
      } else if (v instanceof java.math.BigInteger bi) {
        p.packBigInteger(bi);
      } else if (v instanceof EventTime t) {
        p.packExtensionTypeHeader((byte) 0, 8).writePayload(t.toBytes(), 2, 8);
      } else if (v instanceof Object[] arr) {
        p.packArrayHeader(2).packString((String) arr[0]).packInt((Integer) arr[1]);
      } else {
        p.packString(v.toString());
      }
      p.flush();
      ByteSink got = new ByteSink(16);
      RecordWriter.value(got, v);
      String what = v == null ? "null" : v.getClass().getSimpleName() + " " + v;
      assertArrayEquals(
          expected.toByteArray(),
          got.toByteArray(),
          what.substring(0, Math.min(80, what.length())));
    }
  }

  @Test
  void eventTimeBounds() {
    assertThrows(IllegalArgumentException.class, () -> new EventTime(-1, 0));
    assertThrows(IllegalArgumentException.class, () -> new EventTime(0, 1_000_000_000L));
    assertEquals(new EventTime(1, 500_000_000L), EventTime.ofEpochMillis(1500));
  }

  static Chunk chunk(String tag, int first, int n) {
    Chunk c = new Chunk(tag, 64);
    for (int i = first; i < first + n; i++) {
      byte[] e = Forward.encodeEntry(new EventTime(i, 0), Map.of("seq", (long) i));
      c.append(e, e.length);
    }
    return c;
  }

  static byte[] data(Chunk c) {
    return Arrays.copyOfRange(c.buf, c.start, c.end);
  }

  @Test
  void spillFileKeepsOrderAndTruncatesWhenDrained() throws Exception {
    Path p = tmp.resolve("s.spill");
    try (SpillFile f = new SpillFile(p, 1 << 20)) {
      Chunk a = chunk("t.a", 0, 10);
      Chunk b = chunk("t.b", 10, 5);
      assertTrue(f.append(a));
      assertTrue(f.append(b));
      assertTrue(f.hasUnread());
      Chunk ra = f.readNext();
      Chunk rb = f.readNext();
      assertNull(f.readNext());
      assertEquals("t.a", ra.tag);
      assertEquals(10, ra.count);
      assertArrayEquals(data(a), data(ra));
      assertEquals("t.b", rb.tag);
      assertArrayEquals(data(b), data(rb));
      assertTrue(f.hasPending());
      f.complete(ra);
      f.complete(rb);
      assertFalse(f.hasPending());
      assertEquals(0, Files.size(p));
    }
  }

  @Test
  void spillFileResumesAfterReopenAndCutsATornTail() throws Exception {
    Path p = tmp.resolve("r.spill");
    try (SpillFile f = new SpillFile(p, 1 << 20)) {
      f.append(chunk("t", 0, 3));
      f.append(chunk("t", 3, 4));
      f.append(chunk("t", 7, 5));
      f.complete(f.readNext()); // the first record is delivered
    }
    long size = Files.size(p);
    try (FileChannel ch = FileChannel.open(p, StandardOpenOption.WRITE)) {
      ch.truncate(size - 3); // a torn last record
    }
    try (SpillFile f = new SpillFile(p, 1 << 20)) {
      assertEquals(4, f.recoveredEvents());
      Chunk c = f.readNext();
      assertEquals(4, c.count);
      assertEquals(3L, Forward.decodeEntries(data(c)).get(0).time().seconds());
      assertNull(f.readNext());
    }
  }

  @Test
  void spillFileLimit() throws Exception {
    try (SpillFile f = new SpillFile(tmp.resolve("l.spill"), 200)) {
      assertTrue(f.append(chunk("t", 0, 3)));
      assertFalse(f.append(chunk("t", 3, 10)));
    }
  }

  @Test
  void encoderValues() throws Exception {
    Map<String, Object> rec = new java.util.LinkedHashMap<>();
    rec.put("i", 1);
    rec.put("neg", -200L);
    rec.put("f", 1.5f);
    rec.put("b", new byte[] {1, 2});
    rec.put("l", List.of("x", 2));
    rec.put("arr", new Object[] {true, null});
    rec.put("o", new StringBuilder("sb"));
    byte[] e = Forward.encodeEntry(new EventTime(1, 2), rec);
    Map<String, Object> back = Forward.decodeEntries(e).get(0).record();
    assertEquals(1L, back.get("i"));
    assertEquals(-200L, back.get("neg"));
    assertEquals(1.5, back.get("f"));
    assertArrayEquals(new byte[] {1, 2}, (byte[]) back.get("b"));
    assertEquals(List.of("x", 2L), back.get("l"));
    assertEquals(Arrays.asList(true, null), back.get("arr"));
    assertEquals("sb", back.get("o"));
  }
}
