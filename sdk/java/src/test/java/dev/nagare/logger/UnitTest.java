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
