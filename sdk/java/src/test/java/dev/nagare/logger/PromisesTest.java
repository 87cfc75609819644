package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** README promises about close() that failed in issue 17. */
@Timeout(60)
class PromisesTest {
  static NagareLogger.Builder client(int port, Duration backoff) {
    return NagareLogger.builder()
        .server("127.0.0.1:" + port)
        .flushInterval(Duration.ofMillis(20))
        .connectTimeout(Duration.ofSeconds(2))
        .retry(backoff, Duration.ofSeconds(30), 2.0, 0.2)
        .shutdownHook(false);
  }

  @Test
  void closeReconnectsAtOnceAfterALongBackoff() throws Exception {
    int port = TestServer.freePort();
    List<NagareError> errors = new CopyOnWriteArrayList<>();
    // after the first refused connect the logger waits 16-24 s
    NagareLogger log = client(port, Duration.ofSeconds(20)).errorHandler(errors::add).build();
    for (int i = 0; i < 1000; i++) {
      assertTrue(log.emit("app.late", ClientTest.rec(i)));
    }
    long end = System.nanoTime() + 10_000_000_000L;
    while (errors.isEmpty() && System.nanoTime() < end) {
      Thread.sleep(5);
    }
    assertFalse(errors.isEmpty(), "no connect attempt failed");
    try (TestServer srv = TestServer.tcp(port)) {
      long t0 = System.nanoTime();
      assertTrue(log.close(Duration.ofSeconds(5)));
      assertTrue(System.nanoTime() - t0 < 5_000_000_000L);
      srv.awaitEvents(1000, 5000);
      assertEquals(ClientTest.range(0, 1000), srv.seqs("app.late"));
      Stats s = log.stats();
      assertEquals(1000, s.sent());
      assertEquals(0, s.dropped());
      assertEquals(0, s.buffered());
    }
  }

  @Test
  void closeThatDropsEventsReturnsFalseAndTheCountersAddUp() throws Exception {
    int port = TestServer.freePort(); // nothing listens
    NagareLogger log = client(port, Duration.ofMillis(20)).build();
    for (int i = 0; i < 500; i++) {
      log.emit("app.lost", ClientTest.rec(i));
    }
    assertFalse(log.close(Duration.ofMillis(300)), "nothing was delivered");
    assertFalse(log.close(Duration.ofMillis(300)), "a second close() says the same");
    Stats s = log.stats();
    assertEquals(500, s.dropped());
    assertEquals(500, s.sent() + s.dropped() + s.buffered());
  }
}
