package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The client against the scripted test server. */
@Timeout(60)
class ClientTest {
  static final Duration T = Duration.ofSeconds(20);

  @TempDir Path tmp;

  static Map<String, Object> rec(long seq) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("seq", seq);
    m.put("message", "hello nagare " + seq);
    return m;
  }

  static List<Long> range(long from, long to) {
    return LongStream.range(from, to).boxed().collect(Collectors.toList());
  }

  /** Waits (up to 5 s) until the logger's counters satisfy cond. */
  static Stats awaitStats(NagareLogger log, String what, java.util.function.Predicate<Stats> cond)
      throws InterruptedException {
    long deadline = System.nanoTime() + 5_000_000_000L;
    while (!cond.test(log.stats())) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError(what + ": not within 5 s: " + log.stats());
      }
      Thread.sleep(10);
    }
    return log.stats();
  }

  static NagareLogger.Builder base(String... servers) {
    NagareLogger.Builder b =
        NagareLogger.builder()
            .flushInterval(Duration.ofMillis(20))
            .connectTimeout(Duration.ofSeconds(2))
            .retry(Duration.ofMillis(20), Duration.ofMillis(200), 2.0, 0.2)
            .shutdownHook(false);
    for (String s : servers) {
      b.server(s);
    }
    return b;
  }

  @Test
  void deliversEventsInOrderWithNanosecondTime() throws Exception {
    try (TestServer srv = TestServer.tcp();
        NagareLogger log = base(srv.address()).build()) {
      EventTime t = new EventTime(1_700_000_000L, 123_456_789L);
      for (int i = 0; i < 3000; i++) {
        assertTrue(log.emit(i % 2 == 0 ? "app.even" : "app.odd", rec(i), t));
      }
      assertTrue(log.flush(T));
      assertEquals(3000, srv.awaitEvents(3000, 5000));
      List<Long> even = srv.seqs("app.even");
      List<Long> odd = srv.seqs("app.odd");
      assertEquals(range(0, 1500).stream().map(x -> 2 * x).toList(), even);
      assertEquals(range(0, 1500).stream().map(x -> 2 * x + 1).toList(), odd);
      TestServer.Event e = srv.snapshot().get(0);
      assertEquals(t, e.time());
      assertEquals("hello nagare " + e.record().get("seq"), e.record().get("message"));
      for (TestServer.FrameInfo f : srv.frames) {
        assertEquals(Forward.Mode.PACKED, f.mode());
      }
      Stats s = log.stats();
      assertEquals(3000, s.sent());
      assertEquals(0, s.buffered());
      assertEquals(0, s.dropped());
    }
  }

  @Test
  void closeFlushesWhatIsBuffered() throws Exception {
    try (TestServer srv = TestServer.tcp()) {
      NagareLogger log = base(srv.address()).flushInterval(Duration.ofSeconds(30)).build();
      for (int i = 0; i < 500; i++) {
        log.emit("app.close", rec(i));
      }
      assertTrue(log.close(T));
      srv.awaitEvents(500, 5000);
      assertEquals(range(0, 500), srv.seqs("app.close"));
      assertFalse(log.emit("app.close", rec(999)), "emit after close is refused");
      assertEquals(1, log.stats().dropped());
    }
  }

  @Test
  void nothingLostAcrossServerRestart() throws Exception {
    TestServer srv = TestServer.tcp();
    int port = srv.port();
    try (NagareLogger log = base(srv.address()).build()) {
      for (int i = 0; i < 100; i++) {
        log.emit("app.restart", rec(i));
      }
      assertTrue(log.flush(T));
      assertEquals(100, srv.awaitEvents(100, 5000));
      srv.stop(); // closes the connection: the client must notice before writing
      Thread.sleep(100);
      for (int i = 100; i < 200; i++) {
        log.emit("app.restart", rec(i));
      }
      assertFalse(log.flush(Duration.ofMillis(300)), "server is down, events stay buffered");
      assertEquals(100, log.stats().buffered());
      srv.start(); // same port
      assertEquals(port, srv.port());
      assertTrue(log.flush(T));
      srv.awaitEvents(200, 5000);
      assertEquals(range(0, 200), srv.seqs("app.restart"));
      assertTrue(log.stats().reconnects() >= 1);
    } finally {
      srv.close();
    }
  }

  @Test
  void backoffIntervalsGrow() throws Exception {
    int port = TestServer.freePort(); // nothing listens: every connect is refused
    List<Long> times = new CopyOnWriteArrayList<>();
    try (NagareLogger log =
        base("127.0.0.1:" + port)
            .retry(Duration.ofMillis(100), Duration.ofSeconds(10), 2.0, 0.2)
            .errorHandler(
                e -> {
                  if (e.kind() == NagareError.Kind.CONNECT) {
                    times.add(e.nanoTime());
                  }
                })
            .closeTimeout(Duration.ofMillis(100))
            .build()) {
      log.emit("app.backoff", rec(0));
      long end = System.currentTimeMillis() + 15_000;
      while (times.size() < 6 && System.currentTimeMillis() < end) {
        Thread.sleep(20);
      }
      assertTrue(times.size() >= 6, "connect attempts: " + times.size());
      List<Double> gaps = new ArrayList<>();
      for (int i = 1; i < 6; i++) {
        gaps.add((times.get(i) - times.get(i - 1)) / 1e6);
      }
      // Nominal 100, 200, 400, 800, 1600 ms, each ±20%: every gap is longer than the one before.
      for (int i = 1; i < gaps.size(); i++) {
        assertTrue(gaps.get(i) > gaps.get(i - 1), "gaps " + gaps);
      }
      assertTrue(gaps.get(0) >= 80 - 1, "first gap " + gaps);
      assertTrue(gaps.get(4) > 6 * gaps.get(0), "gaps " + gaps);
      assertTrue(log.stats().errors() >= 6);
    }
  }

  @Test
  void spillsToDiskAndDrainsInOrder() throws Exception {
    int port = TestServer.freePort();
    Path spill = tmp.resolve("spill/events.spill");
    try (NagareLogger log =
        base("127.0.0.1:" + port)
            .bufferLimit(8 * 1024)
            .chunkLimit(2 * 1024)
            .spillPath(spill)
            .build()) {
      for (int i = 0; i < 3000; i++) {
        assertTrue(log.emit("app.spill", rec(i)));
      }
      // counted as spilled once fsync'd, within 200 ms
      Stats s = awaitStats(log, "spilled, fsync'd", st -> st.spilled() > 2000);
      assertEquals(3000, s.buffered());
      assertEquals(0, s.dropped());
      assertTrue(Files.size(spill) > 100_000, "spill file size " + Files.size(spill));
      try (TestServer srv = TestServer.tcp(port)) {
        assertTrue(log.flush(T));
        srv.awaitEvents(3000, 5000);
        assertEquals(range(0, 3000), srv.seqs("app.spill"));
        assertEquals(0, Files.size(spill), "drained spill file is truncated");
        assertEquals(3000, log.stats().sent());
      }
    }
  }

  /**
   * With a spill file, events go to disk while no server answers, not only when memory is full: the
   * file as a kill -9 would leave it (copied while the logger runs) holds every event, and a logger
   * opened on the copy sends them.
   */
  @Test
  void spillsDuringAnOutageWithRoomInMemory() throws Exception {
    int port = TestServer.freePort();
    Path spill = tmp.resolve("outage.spill");
    try (NagareLogger log = base("127.0.0.1:" + port).spillPath(spill).build()) {
      for (int i = 0; i < 500; i++) {
        assertTrue(log.emit("app.outage", rec(i)));
      }
      awaitStats(log, "first 500 on disk", st -> st.spillPending() == 500);
      for (int i = 500; i < 1000; i++) { // the logger knows of the outage now
        assertTrue(log.emit("app.outage", rec(i)));
      }
      Stats s = awaitStats(log, "all on disk", st -> st.spillPending() == 1000);
      assertEquals(List.of(1000L, 1000L, 0L), List.of(s.buffered(), s.spilled(), s.dropped()));
      Path crashed = tmp.resolve("crashed.spill");
      Files.copy(spill, crashed);
      Path offset = tmp.resolve("outage.spill.offset");
      if (Files.exists(offset)) {
        Files.copy(offset, tmp.resolve("crashed.spill.offset"));
      }
      try (TestServer srv = TestServer.tcp();
          NagareLogger next = base(srv.address()).spillPath(crashed).ack(true).build()) {
        assertTrue(next.flush(T));
        srv.awaitEvents(1000, 5000);
        assertEquals(range(0, 1000), srv.seqs("app.outage"));
        assertEquals(List.of(1000L, 0L), List.of(next.stats().sent(), next.stats().spillPending()));
      }
    }
  }

  @Test
  void spillFileSurvivesTheLoggerAndIsSentByTheNextOne() throws Exception {
    int port = TestServer.freePort();
    Path spill = tmp.resolve("keep.spill");
    NagareLogger first =
        base("127.0.0.1:" + port).spillPath(spill).bufferLimit(4096).chunkLimit(1024).build();
    for (int i = 0; i < 400; i++) {
      first.emit("app.keep", rec(i));
    }
    assertFalse(first.close(Duration.ofMillis(300)), "server down: not delivered");
    assertEquals(0, first.stats().dropped(), "undelivered events go to the spill file");
    try (NagareLogger second = base("127.0.0.1:" + port).spillPath(spill).build()) {
      // Counted while the server is still down: once it listens, the sender drains the file.
      assertEquals(400, second.stats().buffered(), "the next logger finds the spill file's events");
      try (TestServer srv = TestServer.tcp(port)) {
        assertTrue(second.flush(T));
        srv.awaitEvents(400, 5000);
        assertEquals(range(0, 400), srv.seqs("app.keep"));
      }
    }
  }

  @Test
  void failsOverAndReturnsToPrimary() throws Exception {
    int primaryPort = TestServer.freePort();
    try (TestServer secondary = TestServer.tcp();
        NagareLogger log =
            base("127.0.0.1:" + primaryPort, secondary.address())
                .ack(true)
                .primaryRetry(Duration.ofMillis(200))
                .build()) {
      for (int i = 0; i < 50; i++) {
        log.emit("app.failover", rec(i));
      }
      assertTrue(log.flush(T));
      secondary.awaitEvents(50, 5000);
      assertEquals(range(0, 50), secondary.seqs("app.failover"));
      try (TestServer primary = TestServer.tcp(primaryPort)) {
        long end = System.currentTimeMillis() + 10_000;
        int i = 50;
        while (primary.events.isEmpty() && System.currentTimeMillis() < end) {
          log.emit("app.failover", rec(i++));
          log.flush(T);
          Thread.sleep(20);
        }
        assertFalse(primary.events.isEmpty(), "back on the primary");
        int onSecondary = secondary.events.size();
        for (int j = 0; j < 50; j++) {
          log.emit("app.failover", rec(i++));
        }
        assertTrue(log.flush(T));
        primary.awaitEvents(i - onSecondary, 5000);
        assertEquals(onSecondary, secondary.events.size(), "nothing more to the secondary");
        List<Long> all = new ArrayList<>(secondary.seqs("app.failover"));
        all.addAll(primary.seqs("app.failover"));
        assertEquals(range(0, i), all);
      }
    }
  }

  @Test
  void ackModeResendsUnacknowledgedFrames() throws Exception {
    try (TestServer srv = TestServer.tcp()) {
      srv.withholdAcks.set(1); // the first frame is received but never acknowledged
      try (NagareLogger log =
          base(srv.address()).ack(true).ackTimeout(Duration.ofMillis(300)).build()) {
        for (int i = 0; i < 10; i++) {
          log.emit("app.ack", rec(i));
        }
        assertTrue(log.flush(T));
        Stats s = log.stats();
        assertEquals(10, s.sent());
        assertTrue(s.resent() >= 1, "resent " + s.resent());
        List<TestServer.FrameInfo> frames = new ArrayList<>(srv.frames);
        assertTrue(frames.size() >= 2);
        String first = frames.get(0).chunk();
        assertNotNull(first);
        assertEquals(
            2,
            frames.stream().filter(f -> first.equals(f.chunk())).count(),
            "the unacknowledged frame was sent again with the same chunk id");
        assertEquals(new HashSet<>(range(0, 10)), new HashSet<>(srv.seqs("app.ack")));
        assertTrue(srv.accepted.get() >= 2, "reconnected after the ack timeout");
      }
    }
  }

  @Test
  void slowAcksWithinTheTimeoutAreNotResent() throws Exception {
    try (TestServer srv = TestServer.tcp()) {
      srv.ackDelayMs = 150;
      try (NagareLogger log =
          base(srv.address()).ack(true).ackTimeout(Duration.ofSeconds(3)).chunkLimit(512).build()) {
        for (int i = 0; i < 40; i++) {
          log.emit("app.slowack", rec(i));
        }
        assertTrue(log.flush(T));
        assertEquals(0, log.stats().resent());
        assertEquals(range(0, 40), srv.seqs("app.slowack"));
        assertEquals(1, srv.accepted.get());
      }
    }
  }

  @Test
  void ackModeDeliversWithoutLossAcrossRestart() throws Exception {
    TestServer srv = TestServer.tcp();
    try (NagareLogger log = base(srv.address()).ack(true).build()) {
      for (int i = 0; i < 1000; i++) {
        log.emit("app.ackrestart", rec(i));
        if (i == 500) {
          assertTrue(log.flush(T));
          srv.stop();
          srv.start();
        }
      }
      assertTrue(log.flush(T));
      assertEquals(new HashSet<>(range(0, 1000)), new HashSet<>(srv.seqs("app.ackrestart")));
    } finally {
      srv.close();
    }
  }

  @Test
  void unixSocket() throws Exception {
    Path sock = tmp.resolve("n.sock");
    try (TestServer srv = TestServer.unix(sock);
        NagareLogger log = base("unix://" + sock).ack(true).build()) {
      for (int i = 0; i < 200; i++) {
        log.emit("app.unix", rec(i));
      }
      assertTrue(log.flush(T));
      assertEquals(range(0, 200), srv.seqs("app.unix"));
    }
  }

  @Test
  void sharedKeyHandshake() throws Exception {
    try (TestServer srv = TestServer.withSharedKey("s3cret");
        NagareLogger log = base(srv.address()).sharedKey("s3cret").ack(true).build()) {
      for (int i = 0; i < 20; i++) {
        log.emit("app.auth", rec(i));
      }
      assertTrue(log.flush(T));
      assertEquals(range(0, 20), srv.seqs("app.auth"));
    }
  }

  @Test
  void wrongSharedKeyIsReportedAndNothingIsSent() throws Exception {
    List<NagareError> errs = new CopyOnWriteArrayList<>();
    try (TestServer srv = TestServer.withSharedKey("right");
        NagareLogger log =
            base(srv.address())
                .sharedKey("wrong")
                .errorHandler(errs::add)
                .closeTimeout(Duration.ofMillis(100))
                .build()) {
      log.emit("app.auth", rec(0));
      assertFalse(log.flush(Duration.ofMillis(800)));
      assertTrue(
          errs.stream().anyMatch(e -> e.kind() == NagareError.Kind.HANDSHAKE), "errors: " + errs);
      assertEquals(1, log.stats().buffered());
      assertTrue(srv.events.isEmpty());
    }
  }

  @Test
  void dropModeCountsDrops() throws Exception {
    int port = TestServer.freePort();
    List<NagareError> errs = new CopyOnWriteArrayList<>();
    try (NagareLogger log =
        base("127.0.0.1:" + port)
            .bufferLimit(4096)
            .overflow(Overflow.DROP)
            .errorHandler(errs::add)
            .closeTimeout(Duration.ofMillis(100))
            .build()) {
      int accepted = 0;
      for (int i = 0; i < 1000; i++) {
        if (log.emit("app.drop", rec(i))) {
          accepted++;
        }
      }
      Stats s = log.stats();
      assertTrue(accepted < 1000 && accepted > 0, "accepted " + accepted);
      assertEquals(1000 - accepted, s.dropped());
      assertEquals(accepted, s.buffered());
      Thread.sleep(100);
      assertTrue(errs.stream().anyMatch(e -> e.kind() == NagareError.Kind.DROPPED));
    }
  }

  @Test
  void blockModeWaitsThenDrops() throws Exception {
    int port = TestServer.freePort();
    try (NagareLogger log =
        base("127.0.0.1:" + port)
            .bufferLimit(2048)
            .overflow(Overflow.BLOCK)
            .blockTimeout(Duration.ofMillis(300))
            .closeTimeout(Duration.ofMillis(100))
            .build()) {
      int i = 0;
      while (log.stats().buffered() * 40 < 1800) {
        assertTrue(log.emit("app.block", rec(i++)));
      }
      long t0 = System.nanoTime();
      boolean ok = true;
      while (ok) {
        ok = log.emit("app.block", rec(i++));
      }
      long waited = (System.nanoTime() - t0) / 1_000_000;
      assertTrue(waited >= 250, "emit blocked for " + waited + " ms");
      assertEquals(1, log.stats().dropped());
    }
  }

  @Test
  void blockModeResumesWhenServerReturns() throws Exception {
    int port = TestServer.freePort();
    try (NagareLogger log =
        base("127.0.0.1:" + port).bufferLimit(4096).overflow(Overflow.BLOCK).build()) {
      Thread starter =
          new Thread(
              () -> {
                try {
                  Thread.sleep(300);
                  TestServer.tcp(port);
                } catch (Exception e) {
                  throw new RuntimeException(e);
                }
              });
      starter.start();
      for (int i = 0; i < 2000; i++) {
        assertTrue(log.emit("app.blockresume", rec(i)));
      }
      assertTrue(log.flush(T));
      assertEquals(2000, log.stats().sent());
      assertEquals(0, log.stats().dropped());
    }
  }

  @Test
  void compressedFrames() throws Exception {
    try (TestServer srv = TestServer.tcp();
        NagareLogger log = base(srv.address()).compress(true).ack(true).build()) {
      for (int i = 0; i < 300; i++) {
        log.emit("app.gzip", rec(i));
      }
      assertTrue(log.flush(T));
      assertEquals(range(0, 300), srv.seqs("app.gzip"));
      assertEquals(Forward.Mode.COMPRESSED, srv.frames.get(0).mode());
    }
  }

  @Test
  void manyThreadsEmitConcurrently() throws Exception {
    try (TestServer srv = TestServer.tcp();
        NagareLogger log = base(srv.address()).chunkLimit(4096).build()) {
      List<Thread> ts = new ArrayList<>();
      for (int t = 0; t < 4; t++) {
        String tag = "app.t" + t;
        Thread th =
            new Thread(
                () -> {
                  for (int i = 0; i < 5000; i++) {
                    log.emit(tag, rec(i));
                  }
                });
        ts.add(th);
        th.start();
      }
      for (Thread th : ts) {
        th.join();
      }
      assertTrue(log.flush(T));
      srv.awaitEvents(20000, 5000);
      for (int t = 0; t < 4; t++) {
        assertEquals(range(0, 5000), srv.seqs("app.t" + t));
      }
    }
  }
}
