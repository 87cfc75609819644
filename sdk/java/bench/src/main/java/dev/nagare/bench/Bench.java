package dev.nagare.bench;

import dev.nagare.logger.NagareLogger;
import dev.nagare.logger.Overflow;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.fluentd.logger.FluentLogger;
import org.komamitsu.fluency.EventTime;
import org.komamitsu.fluency.Fluency;
import org.komamitsu.fluency.fluentd.FluencyBuilderForFluentd;

/**
 * One emitting thread sends {@code {"seq": n, "message": <100 bytes>}} records to a forward sink.
 * Prints one JSON line: emit ns/call over the measured events (wall time, and the emitting thread's
 * CPU time), and events/s from the first measured emit until everything is flushed to the socket.
 *
 * <p>Usage: Bench nagare|fluency|fluent-logger|record-only PORT WARMUP COUNT [METRICS_URL]
 *
 * <p>With METRICS_URL (a nagare monitor's {@code /metrics}), after flushing it polls until nagare's
 * null output counted WARMUP + COUNT events, and events/s runs until that moment.
 */
public final class Bench {
  static final String MESSAGE = "x".repeat(100);

  interface Client {
    void emit(long seq) throws Exception;

    void finish() throws Exception;
  }

  /**
   * With BENCH_RECORD=reuse, every emit gets the same map with its "seq" replaced: both libraries
   * encode the record inside emit(), so the map may change afterwards, and the loop then measures
   * emit() without the allocation of a new map per event (which, in the default mode, dominates a
   * profile of the loop).
   */
  static final boolean REUSE = "reuse".equals(System.getenv("BENCH_RECORD"));

  static final Map<String, Object> REUSED = new LinkedHashMap<>();

  static Map<String, Object> rec(long seq) {
    if (REUSE) {
      REUSED.put("seq", seq);
      REUSED.put("message", MESSAGE);
      return REUSED;
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("seq", seq);
    m.put("message", MESSAGE);
    return m;
  }

  static Client nagare(int port) {
    NagareLogger log =
        NagareLogger.builder()
            .server("127.0.0.1:" + port)
            .bufferLimit(1L << 30)
            .overflow(Overflow.BLOCK)
            .build();
    return new Client() {
      @Override
      public void emit(long seq) {
        log.emit("bench.load", rec(seq));
      }

      @Override
      public void finish() {
        if (!log.flush(Duration.ofSeconds(120))) {
          throw new IllegalStateException("not flushed: " + log.stats());
        }
        log.close();
        if (log.stats().dropped() != 0) {
          throw new IllegalStateException("dropped: " + log.stats());
        }
      }
    };
  }

  static Client fluency(int port) {
    FluencyBuilderForFluentd b = new FluencyBuilderForFluentd();
    b.setMaxBufferSize(1L << 30);
    Fluency f = b.build("127.0.0.1", port);
    return new Client() {
      @Override
      public void emit(long seq) throws Exception {
        f.emit("bench.load", EventTime.fromEpochMilli(System.currentTimeMillis()), rec(seq));
      }

      @Override
      public void finish() throws Exception {
        f.flush();
        if (!f.waitUntilAllBufferFlushed(120)) {
          throw new IllegalStateException("fluency not flushed");
        }
        f.close();
        f.waitUntilFlusherTerminated(30);
      }
    };
  }

  static Client fluentLogger(int port) {
    FluentLogger l = FluentLogger.getLogger("bench", "127.0.0.1", port);
    return new Client() {
      @Override
      public void emit(long seq) {
        if (!l.log("load", rec(seq))) {
          throw new IllegalStateException("fluent-logger refused an event");
        }
      }

      @Override
      public void finish() {
        l.flush();
        l.close();
      }
    };
  }

  /** Sink for {@link #recordOnly}, so the JIT cannot drop the records it builds. */
  static volatile Object lastRecord;

  /**
   * No library: builds the record of every event and drops it. Its CPU per call is the part of
   * every library's emit-loop figure that is the application's record, not emit().
   */
  static Client recordOnly() {
    return new Client() {
      @Override
      public void emit(long seq) {
        lastRecord = rec(seq);
      }

      @Override
      public void finish() {}
    };
  }

  static final String NULL_IN =
      "nagare_events_in_total{plugin=\"null#0\",kind=\"output\",type=\"null\"} ";

  /** Reads the count of events a nagare monitor's null output received. */
  static final class Monitor {
    final HttpClient http = HttpClient.newHttpClient();
    final HttpRequest req;

    Monitor(String url) throws Exception {
      req = HttpRequest.newBuilder(URI.create(url)).build();
      // load and connect the HTTP client before the clock starts (nagare may take seconds to
      // start on a busy machine)
      if (waitFor(0, Duration.ofSeconds(60)) < 0) {
        throw new IllegalStateException("nagare monitor does not answer: " + url);
      }
    }

    long count() throws Exception {
      long got = -1;
      try {
        for (String line : http.send(req, HttpResponse.BodyHandlers.ofLines()).body().toList()) {
          if (line.startsWith(NULL_IN)) {
            got = Long.parseLong(line.substring(NULL_IN.length()).trim());
          }
        }
      } catch (IOException e) {
        // not answering: -1, the caller polls again
      }
      return got;
    }

    /** Polls until the count reached {@code want} or {@code limit} passed; the last count. */
    long waitFor(long want, Duration limit) throws Exception {
      long deadline = System.nanoTime() + limit.toNanos();
      while (true) {
        long got = count();
        if (got >= want || System.nanoTime() > deadline) {
          return got;
        }
        Thread.sleep(1);
      }
    }
  }

  public static void main(String[] args) throws Exception {
    String lib = args[0];
    int port = Integer.parseInt(args[1]);
    long warmup = Long.parseLong(args[2]);
    long count = Long.parseLong(args[3]);
    Client c =
        switch (lib) {
          case "nagare" -> nagare(port);
          case "fluency" -> fluency(port);
          case "fluent-logger" -> fluentLogger(port);
          case "record-only" -> recordOnly();
          default -> throw new IllegalArgumentException(lib);
        };
    Monitor monitor = args.length > 4 ? new Monitor(args[4]) : null;
    for (long i = 0; i < warmup; i++) {
      c.emit(i);
    }
    // the emitting thread's CPU time as well as wall time: on a shared machine the wall time of
    // the loop also counts the time the thread waited for a core
    java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
    long cpu0 = mx.getCurrentThreadCpuTime();
    long t0 = System.nanoTime();
    for (long i = warmup; i < warmup + count; i++) {
      c.emit(i);
    }
    long t1 = System.nanoTime();
    long cpu1 = mx.getCurrentThreadCpuTime();
    c.finish();
    long received = -1;
    if (monitor != null) {
      received = monitor.waitFor(warmup + count, Duration.ofMinutes(1));
    }
    long t2 = System.nanoTime();
    System.out.printf(
        "{\"lib\":\"%s\",\"events\":%d,\"emit_ns_per_call\":%.1f,\"emit_cpu_ns_per_call\":%.1f,"
            + "\"record\":\"%s\","
            + "\"emit_s\":%.3f,\"total_s\":%.3f,\"events_per_s\":%.0f%s}%n",
        lib,
        count,
        (t1 - t0) / (double) count,
        (cpu1 - cpu0) / (double) count,
        REUSE ? "reused" : "new per event",
        (t1 - t0) / 1e9,
        (t2 - t0) / 1e9,
        count / ((t2 - t0) / 1e9),
        received < 0 ? "" : ",\"received\":" + received);
  }
}
