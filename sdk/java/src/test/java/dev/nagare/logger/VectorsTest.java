package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;

/** The shared test vectors in sdk/vectors/vectors.json, byte for byte. */
class VectorsTest {
  static final HexFormat HEX = HexFormat.of();
  static final JsonNode V = load();

  static JsonNode load() {
    try {
      Path p = Path.of("..", "vectors", "vectors.json");
      return new ObjectMapper().readTree(Files.readString(p, StandardCharsets.UTF_8));
    } catch (Exception e) {
      throw new IllegalStateException("cannot read sdk/vectors/vectors.json", e);
    }
  }

  /** JSON value to the Java value the encoder takes (ints as Long/BigInteger, floats as Double). */
  static Object java(JsonNode n) {
    if (n.isNull()) {
      return null;
    }
    if (n.isBoolean()) {
      return n.booleanValue();
    }
    if (n.isIntegralNumber()) {
      BigInteger b = n.bigIntegerValue();
      return b.bitLength() <= 63 ? (Object) b.longValue() : b;
    }
    if (n.isNumber()) {
      return n.doubleValue();
    }
    if (n.isTextual()) {
      return n.textValue();
    }
    if (n.isArray()) {
      List<Object> l = new ArrayList<>();
      n.forEach(x -> l.add(java(x)));
      return l;
    }
    Map<String, Object> m = new LinkedHashMap<>();
    n.fields().forEachRemaining(e -> m.put(e.getKey(), java(e.getValue())));
    return m;
  }

  @SuppressWarnings("unchecked")
  static List<Forward.Entry> entries(JsonNode frame) {
    List<Forward.Entry> out = new ArrayList<>();
    for (JsonNode e : frame.get("entries")) {
      out.add(
          new Forward.Entry(
              new EventTime(e.get("sec").longValue(), e.get("nsec").longValue()),
              (Map<String, Object>) java(e.get("record"))));
    }
    return out;
  }

  @Test
  void eventTimes() throws Exception {
    assertTrue(V.get("event_time").size() >= 4);
    for (JsonNode t : V.get("event_time")) {
      EventTime et = new EventTime(t.get("sec").longValue(), t.get("nsec").longValue());
      assertEquals(t.get("hex").textValue(), HEX.formatHex(et.toBytes()));
      try (MessageUnpacker u =
          MessagePack.newDefaultUnpacker(HEX.parseHex(t.get("hex").textValue()))) {
        assertEquals(et, Forward.unpackValue(u));
      }
    }
  }

  @TestFactory
  Stream<DynamicTest> frames() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode f : V.get("frames")) {
      tests.add(DynamicTest.dynamicTest(f.get("name").textValue(), () -> checkFrame(f)));
    }
    assertTrue(tests.size() >= 10);
    return tests.stream();
  }

  void checkFrame(JsonNode f) throws Exception {
    String mode = f.get("mode").textValue();
    String tag = f.get("tag").textValue();
    List<Forward.Entry> entries = entries(f);
    String chunk = f.get("options").has("chunk") ? f.get("options").get("chunk").textValue() : null;
    byte[] want = HEX.parseHex(f.get("hex").textValue());
    byte[] entriesHex = HEX.parseHex(f.get("entries_hex").textValue());

    // Entries encode exactly.
    assertEquals(f.get("entries_hex").textValue(), HEX.formatHex(Forward.encodeEntries(entries)));

    byte[] mine;
    switch (mode) {
      case "message" -> mine = Forward.encodeMessage(tag, entries.get(0), chunk);
      case "forward" -> mine = Forward.encodeForward(tag, entries, chunk);
      case "packed" -> mine = Forward.encodePacked(tag, entriesHex, entries.size(), chunk);
      case "compressed" -> mine = Forward.encodeCompressed(tag, entriesHex, entries.size(), chunk);
      default -> throw new AssertionError("unknown mode " + mode);
    }
    if (!mode.equals("compressed")) {
      assertEquals(f.get("hex").textValue(), HEX.formatHex(mine), "encoding of " + mode);
    }
    // The packed frame the client itself builds from a chunk is the same.
    if (mode.equals("packed") || mode.equals("compressed")) {
      Chunk c = new Chunk(tag, tag.getBytes(StandardCharsets.UTF_8), entriesHex, entries.size());
      c.buildFrame(chunk, mode.equals("compressed"));
      byte[] built = java.util.Arrays.copyOfRange(c.frameArray(), c.frameStart, c.frameEnd);
      if (mode.equals("packed")) {
        assertArrayEquals(want, built);
      } else {
        checkDecoded(Forward.decodeFrame(built), tag, entries, entriesHex, chunk, mode);
      }
    }
    // Decoding the vector and our own bytes gives back tag, entries and options.
    checkDecoded(Forward.decodeFrame(want), tag, entries, entriesHex, chunk, mode);
    checkDecoded(Forward.decodeFrame(mine), tag, entries, entriesHex, chunk, mode);
  }

  void checkDecoded(
      Forward.Frame d,
      String tag,
      List<Forward.Entry> entries,
      byte[] entriesHex,
      String chunk,
      String mode) {
    assertEquals(tag, d.tag());
    assertEquals(mode.toUpperCase(java.util.Locale.ROOT), d.mode().name());
    assertEquals(entries, d.entries());
    assertArrayEquals(entriesHex, d.entriesBytes());
    assertEquals(chunk, d.chunk());
    if (mode.equals("packed") || mode.equals("compressed")) {
      assertEquals((long) entries.size(), d.options().get("size"));
      assertEquals(mode.equals("compressed") ? "gzip" : null, d.options().get("compressed"));
    } else {
      assertEquals(chunk == null ? Map.of() : Map.of("chunk", chunk), d.options());
    }
  }

  @TestFactory
  Stream<DynamicTest> handshakes() {
    List<DynamicTest> tests = new ArrayList<>();
    int i = 0;
    for (JsonNode h : V.get("handshake")) {
      tests.add(DynamicTest.dynamicTest("handshake " + i++, () -> checkHandshake(h)));
    }
    assertTrue(tests.size() >= 2);
    return tests.stream();
  }

  void checkHandshake(JsonNode h) throws Exception {
    byte[] salt = HEX.parseHex(h.get("shared_key_salt_hex").textValue());
    byte[] nonce = HEX.parseHex(h.get("nonce_hex").textValue());
    byte[] auth = HEX.parseHex(h.get("auth_salt_hex").textValue());
    String key = h.get("shared_key").textValue();
    String client = h.get("client_hostname").textValue();
    String server = h.get("server_hostname").textValue();
    String user = h.get("username").textValue();
    String pw = h.get("password").textValue();

    assertEquals(h.get("ping_digest").textValue(), Handshake.pingDigest(salt, client, nonce, key));
    assertEquals(h.get("password_digest").textValue(), Handshake.passwordDigest(auth, user, pw));
    assertEquals(h.get("pong_digest").textValue(), Handshake.pongDigest(salt, server, nonce, key));

    Handshake.Helo helo;
    try (MessageUnpacker u =
        MessagePack.newDefaultUnpacker(HEX.parseHex(h.get("helo_hex").textValue()))) {
      helo = Handshake.parseHelo(u.unpackValue());
    }
    assertArrayEquals(nonce, helo.nonce());
    assertArrayEquals(auth, helo.auth());

    Handshake.Ping ping = Handshake.ping(helo, client, salt, key, user, pw);
    assertEquals(h.get("ping_hex").textValue(), HEX.formatHex(Handshake.encodePing(ping)));

    byte[] pongBytes = HEX.parseHex(h.get("pong_hex").textValue());
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(pongBytes)) {
      Handshake.Pong pong = Handshake.parsePong(u.unpackValue());
      assertEquals(server, pong.serverHostname());
      Handshake.verifyPong(pong, salt, nonce, key);
    }
    // One changed digest byte is rejected.
    byte[] bad = pongBytes.clone();
    bad[bad.length - 1] = (byte) (bad[bad.length - 1] == '0' ? '1' : '0');
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(bad)) {
      Handshake.Pong pong = Handshake.parsePong(u.unpackValue());
      assertThrows(
          Handshake.HandshakeException.class, () -> Handshake.verifyPong(pong, salt, nonce, key));
    }
  }
}
