package dev.nagare.logger;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Drives the Java library for the conformance suite (protocol: sdk/conformance/README.md): one
 * command per line on stdin, one JSON reply per line on stdout.
 */
public final class ConformanceDriver {
  private ConformanceDriver() {}

  /** An SSLContext that trusts the CA certificate in a PEM file. */
  private static javax.net.ssl.SSLContext trusting(Path caPem) throws Exception {
    java.security.KeyStore ks = java.security.KeyStore.getInstance("PKCS12");
    ks.load(null, null);
    try (java.io.InputStream in = java.nio.file.Files.newInputStream(caPem)) {
      ks.setCertificateEntry(
          "ca", java.security.cert.CertificateFactory.getInstance("X.509").generateCertificate(in));
    }
    javax.net.ssl.TrustManagerFactory tmf =
        javax.net.ssl.TrustManagerFactory.getInstance(
            javax.net.ssl.TrustManagerFactory.getDefaultAlgorithm());
    tmf.init(ks);
    javax.net.ssl.SSLContext ctx = javax.net.ssl.SSLContext.getInstance("TLS");
    ctx.init(null, tmf.getTrustManagers(), null);
    return ctx;
  }

  /**
   * n records through the Logback appender, as an application configures it: an appender on a
   * logger of Logback's context, sending through the driver's logger (so its counters are the
   * driver's).
   */
  private static void logback(NagareLogger log, String tag, long start, long n) {
    ch.qos.logback.classic.LoggerContext ctx =
        (ch.qos.logback.classic.LoggerContext) org.slf4j.LoggerFactory.getILoggerFactory();
    ch.qos.logback.classic.Logger logger = ctx.getLogger("conformance." + tag);
    if (logger.getAppender("nagare") == null) {
      dev.nagare.logger.logback.NagareAppender appender =
          new dev.nagare.logger.logback.NagareAppender();
      appender.setName("nagare");
      appender.setContext(ctx);
      appender.setLogger(log);
      appender.setTag(tag);
      appender.start();
      logger.setAdditive(false);
      logger.addAppender(appender);
    }
    for (long i = start; i < start + n; i++) {
      logger.info("seq {}", i);
    }
  }

  public static void main(String[] args) throws Exception {
    ObjectMapper json = new ObjectMapper();
    // replies go to the real stdout; anything a library prints (Logback's console appender or
    // status messages) goes to stderr, so it cannot break the protocol
    java.io.PrintStream out = System.out;
    System.setOut(System.err);
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    NagareLogger log = null;
    Map<String, Long> seqs = new HashMap<>();
    // connection attempts that failed (the runner waits on it, not on sleeps)
    AtomicLong connectFailures = new AtomicLong();
    String line;
    while ((line = in.readLine()) != null) {
      String[] parts = line.trim().split(" ", 2);
      String cmd = parts[0];
      String arg = parts.length > 1 ? parts[1] : "";
      Map<String, Object> reply = new LinkedHashMap<>();
      try {
        switch (cmd) {
          case "configure" -> {
            JsonNode o = json.readTree(arg);
            NagareLogger.Builder b =
                NagareLogger.builder()
                    .shutdownHook(false)
                    .ack(o.path("require_ack").asBoolean(false))
                    .retry(
                        Duration.ofMillis(o.path("backoff_base_ms").asLong(100)),
                        Duration.ofMillis(o.path("backoff_max_ms").asLong(30_000)),
                        2.0,
                        0.2);
            for (JsonNode s : o.path("servers")) {
              b.server(s.asText());
            }
            if (o.hasNonNull("tls_ca")) {
              b.tls(true).sslContext(trusting(Path.of(o.get("tls_ca").asText())));
            }
            if (o.hasNonNull("buffer_bytes")) {
              b.bufferLimit(o.get("buffer_bytes").asLong());
            }
            if (o.hasNonNull("overflow")) {
              b.overflow(Overflow.valueOf(o.get("overflow").asText().toUpperCase(Locale.ROOT)));
            }
            b.errorHandler(
                e -> {
                  if (e.kind() == NagareError.Kind.CONNECT) {
                    connectFailures.incrementAndGet();
                  }
                });
            if (o.hasNonNull("spill_path")) {
              b.spillPath(Path.of(o.get("spill_path").asText()));
            }
            log = b.build();
            reply.put("ok", true);
          }
          case "emit" -> {
            String[] tn = arg.split(" ");
            long n = Long.parseLong(tn[1]);
            long start = seqs.getOrDefault(tn[0], 0L);
            seqs.put(tn[0], start + n);
            long accepted = 0;
            for (long i = start; i < start + n; i++) {
              if (log.emit(tn[0], Map.of("seq", i))) {
                accepted++;
              }
            }
            reply.put("accepted", accepted);
          }
          case "log" -> {
            // through a logging integration, message "seq N": java.util.logging (the default)
            // or Logback ("log TAG N logback"), both around the driver's logger
            String[] tn = arg.split(" ");
            long n = Long.parseLong(tn[1]);
            long start = seqs.getOrDefault(tn[0], 0L);
            seqs.put(tn[0], start + n);
            if (tn.length > 2 && tn[2].equals("logback")) {
              logback(log, tn[0], start, n);
            } else if (tn.length > 2 && !tn[2].equals("jul")) {
              throw new IllegalArgumentException("no logging integration " + tn[2]);
            } else {
              java.util.logging.Logger jul =
                  java.util.logging.Logger.getLogger("conformance." + tn[0]);
              if (jul.getHandlers().length == 0) {
                jul.setUseParentHandlers(false);
                jul.addHandler(new dev.nagare.logger.jul.NagareHandler(log, tn[0]));
              }
              for (long i = start; i < start + n; i++) {
                jul.info("seq " + i);
              }
            }
            reply.put("logged", n);
          }
          case "close" -> {
            long t0 = System.nanoTime();
            boolean ok = log.close(Duration.ofMillis(Long.parseLong(arg)));
            reply.put("closed", ok);
            reply.put("ms", (System.nanoTime() - t0) / 1_000_000);
          }
          case "stats" -> {
            Stats s = log.stats();
            reply.put("sent", s.sent());
            reply.put("dropped", s.dropped());
            // kept: what the spill file holds, fsync'd (after close, what it keeps)
            reply.put("kept", s.spillPending());
            reply.put("buffered", s.buffered());
            reply.put("connect_failures", connectFailures.get());
          }
          case "quit" -> {
            return;
          }
          default -> reply.put("error", "unknown command " + cmd);
        }
      } catch (RuntimeException e) {
        reply.put("error", e.toString());
      }
      out.println(json.writeValueAsString(reply));
      out.flush();
    }
  }
}
