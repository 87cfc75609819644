package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** TLS against a test server with a certificate made by the JDK's keytool. */
@Timeout(60)
class TlsTest {
  @TempDir Path tmp;

  KeyStore keystore() throws Exception {
    Path ks = tmp.resolve("server.p12");
    String keytool = Path.of(System.getProperty("java.home"), "bin", "keytool").toString();
    Process p =
        new ProcessBuilder(
                keytool,
                "-genkeypair",
                "-alias",
                "nagare",
                "-keyalg",
                "EC",
                "-groupname",
                "secp256r1",
                "-dname",
                "CN=localhost",
                "-ext",
                "san=ip:127.0.0.1,dns:localhost",
                "-validity",
                "2",
                "-storetype",
                "PKCS12",
                "-keystore",
                ks.toString(),
                "-storepass",
                "changeit",
                "-keypass",
                "changeit")
            .redirectErrorStream(true)
            .start();
    String out = new String(p.getInputStream().readAllBytes());
    assertTrue(p.waitFor(30, TimeUnit.SECONDS));
    assertEquals(0, p.exitValue(), out);
    KeyStore k = KeyStore.getInstance("PKCS12");
    try (InputStream in = Files.newInputStream(ks)) {
      k.load(in, "changeit".toCharArray());
    }
    return k;
  }

  @Test
  void sendsOverTls() throws Exception {
    KeyStore ks = keystore();
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(ks, "changeit".toCharArray());
    SSLContext server = SSLContext.getInstance("TLS");
    server.init(kmf.getKeyManagers(), null, null);
    TrustManagerFactory tmf =
        TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    tmf.init(ks);
    SSLContext client = SSLContext.getInstance("TLS");
    client.init(null, tmf.getTrustManagers(), null);

    try (TestServer srv = TestServer.tls(server)) {
      try (NagareLogger log =
          NagareLogger.builder()
              .server("tls://127.0.0.1:" + srv.port())
              .sslContext(client)
              .ack(true)
              .flushInterval(Duration.ofMillis(20))
              .shutdownHook(false)
              .build()) {
        for (int i = 0; i < 100; i++) {
          log.emit("app.tls", ClientTest.rec(i));
        }
        assertTrue(log.flush(Duration.ofSeconds(20)));
        assertEquals(ClientTest.range(0, 100), srv.seqs("app.tls"));
      }
      // A client that does not trust the certificate sends nothing.
      List<NagareError> errs = new CopyOnWriteArrayList<>();
      try (NagareLogger log =
          NagareLogger.builder()
              .server("tls://127.0.0.1:" + srv.port())
              .flushInterval(Duration.ofMillis(20))
              .errorHandler(errs::add)
              .closeTimeout(Duration.ofMillis(100))
              .shutdownHook(false)
              .build()) {
        log.emit("app.tls", ClientTest.rec(1000));
        assertFalse(log.flush(Duration.ofMillis(800)));
        // The refused handshake is reported by the sender thread: wait for
        // it with a deadline (a loaded machine can take longer than 800 ms).
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (errs.stream().noneMatch(e -> e.kind() == NagareError.Kind.CONNECT)
            && System.nanoTime() < deadline) {
          Thread.sleep(20);
        }
        assertTrue(errs.stream().anyMatch(e -> e.kind() == NagareError.Kind.CONNECT), "" + errs);
      }
      assertEquals(100, srv.events.size());
    }
  }
}
