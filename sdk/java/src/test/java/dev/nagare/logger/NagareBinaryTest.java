package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Against the real daemon: NAGARE_BIN, or target/release/nagare at the repository root. This test
 * fails (it does not skip) when the binary is missing: build it first.
 */
@Timeout(120)
class NagareBinaryTest {
  @TempDir Path tmp;

  static Path binary() {
    String env = System.getenv("NAGARE_BIN");
    Path p =
        env != null && !env.isBlank()
            ? Path.of(env)
            : Path.of("..", "..", "target", "release", "nagare").toAbsolutePath().normalize();
    if (!Files.isExecutable(p)) {
      fail(
          "nagare binary not found at "
              + p
              + ": build it with `cargo build --release` at the repository root, or set"
              + " NAGARE_BIN");
    }
    return p;
  }

  @Test
  void eventsArriveAtTheRealDaemon() throws Exception {
    int port = TestServer.freePort();
    run("bind = \"127.0.0.1:" + port + "\"", "127.0.0.1:" + port, port, null, false);
  }

  @Test
  void ackModeOverUnixSocketWithSharedKey() throws Exception {
    Path sock = tmp.resolve("nagare.sock");
    run("path = \"" + sock + "\"\nshared_key = \"k3y\"", "unix://" + sock, -1, sock, true);
  }

  void run(String inputSpec, String address, int port, Path sock, boolean ack) throws Exception {
    Path bin = binary();
    Path cfg = tmp.resolve("nagare.toml");
    Files.writeString(
        cfg,
        "[[input]]\n"
            + "type = \"forward\"\n"
            + inputSpec
            + "\n\n"
            + "[[output]]\n"
            + "type = \"stdout\"\n"
            + "match = \"**\"\n");
    Path err = tmp.resolve("nagare.stderr");
    Process p =
        new ProcessBuilder(bin.toString(), "run", "-c", cfg.toString())
            .redirectError(err.toFile())
            .start();
    List<String> lines = Collections.synchronizedList(new ArrayList<>());
    Thread reader =
        new Thread(
            () -> {
              try (BufferedReader r =
                  new BufferedReader(
                      new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                  lines.add(line);
                }
              } catch (Exception ignored) {
                // process ended
              }
            });
    reader.setDaemon(true);
    reader.start();
    try {
      waitForListener(port, sock, p, err);
      int n = 2000;
      NagareLogger.Builder b =
          NagareLogger.builder()
              .server(address)
              .ack(ack)
              .flushInterval(Duration.ofMillis(20))
              .shutdownHook(false);
      if (ack) {
        b.sharedKey("k3y");
      }
      try (NagareLogger log = b.build()) {
        for (int i = 0; i < n; i++) {
          log.emit("java.e2e", ClientTest.rec(i), new EventTime(1_700_000_000L + i, 123_456_789L));
        }
        assertTrue(log.flush(Duration.ofSeconds(20)), "flushed: " + log.stats());
        assertEquals(n, log.stats().sent());
      }
      long end = System.currentTimeMillis() + 30_000;
      while (countEvents(lines) < n && System.currentTimeMillis() < end) {
        Thread.sleep(50);
      }
      ObjectMapper om = new ObjectMapper();
      TreeSet<Long> seqs = new TreeSet<>();
      List<String> copy;
      synchronized (lines) {
        copy = new ArrayList<>(lines);
      }
      for (String line : copy) {
        if (!line.startsWith("{")) {
          continue;
        }
        JsonNode j = om.readTree(line);
        if (!"java.e2e".equals(j.path("tag").asText())) {
          continue;
        }
        long seq = j.get("record").get("seq").asLong();
        seqs.add(seq);
        assertEquals("hello nagare " + seq, j.get("record").get("message").asText());
        assertTrue(
            j.get("time").asText().contains(".123456789"),
            "nanosecond time kept: " + j.get("time"));
      }
      assertEquals(n, seqs.size(), "distinct seqs received; stderr: " + tail(err));
      assertEquals(0L, seqs.first());
      assertEquals(n - 1L, seqs.last());
    } finally {
      p.destroy();
      if (!p.waitFor(10, TimeUnit.SECONDS)) {
        p.destroyForcibly();
      }
    }
  }

  static int countEvents(List<String> lines) {
    synchronized (lines) {
      int c = 0;
      for (String l : lines) {
        if (l.contains("\"java.e2e\"")) {
          c++;
        }
      }
      return c;
    }
  }

  static void waitForListener(int port, Path sock, Process p, Path err) throws Exception {
    long end = System.currentTimeMillis() + 20_000;
    while (System.currentTimeMillis() < end) {
      if (!p.isAlive()) {
        fail("nagare exited with " + p.exitValue() + ": " + tail(err));
      }
      if (sock != null) {
        if (Files.exists(sock)) {
          try {
            SocketChannel.open(UnixDomainSocketAddress.of(sock)).close();
            return;
          } catch (Exception e) {
            // not accepting yet
          }
        }
        Thread.sleep(50);
        continue;
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 200);
        return;
      } catch (Exception e) {
        Thread.sleep(50);
      }
    }
    fail("nagare did not listen within 20 s: " + tail(err));
  }

  static String tail(Path f) {
    try {
      String s = Files.readString(f);
      return s.length() > 2000 ? s.substring(s.length() - 2000) : s;
    } catch (Exception e) {
      return "(no stderr)";
    }
  }
}
