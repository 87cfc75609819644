package dev.nagare.logger;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import javax.net.ssl.SSLContext;

/**
 * A client for nagare (or any Fluentd forward protocol v1 server).
 *
 * <pre>{@code
 * try (NagareLogger log = NagareLogger.builder().server("127.0.0.1:24224").build()) {
 *   log.emit("app.access", Map.of("path", "/", "status", 200));
 * }
 * }</pre>
 *
 * <p>{@link #emit} encodes the event on the calling thread and puts it into a bounded memory
 * buffer; it does not wait for the network. A background thread sends the buffer as PackedForward
 * frames (one per tag and batch) over one persistent connection, reconnecting with exponential
 * backoff and failing over to the next server. Thread-safe.
 */
public final class NagareLogger implements AutoCloseable {
  private final Pipeline pipeline;
  private final Duration closeTimeout;
  private final Thread shutdownHook;

  private NagareLogger(Config cfg, Duration closeTimeout, boolean hook) throws IOException {
    this.pipeline = new Pipeline(cfg);
    this.closeTimeout = closeTimeout;
    if (hook) {
      shutdownHook = new Thread(() -> pipeline.close(closeTimeout.toMillis()), "nagare-shutdown");
      Runtime.getRuntime().addShutdownHook(shutdownHook);
    } else {
      shutdownHook = null;
    }
  }

  public static Builder builder() {
    return new Builder();
  }

  /**
   * Buffers one event with the current time. Returns false when the event was dropped (buffer full
   * in drop mode, block timeout, record not encodable, or logger closed); drops are counted.
   */
  public boolean emit(String tag, Map<String, ?> record) {
    Instant now = Instant.now();
    return pipeline.emit(tag, now.getEpochSecond(), now.getNano(), record);
  }

  /** Buffers one event with the given time. */
  public boolean emit(String tag, Map<String, ?> record, EventTime time) {
    return pipeline.emit(tag, time.seconds(), time.nanos(), record);
  }

  /** Buffers one event with the given time. */
  public boolean emit(String tag, Map<String, ?> record, Instant time) {
    return pipeline.emit(tag, time.getEpochSecond(), time.getNano(), record);
  }

  /**
   * Sends everything buffered so far (including the spill file) and waits until it is delivered
   * (acknowledged in ack mode). Returns true when nothing is left buffered.
   */
  public boolean flush(Duration timeout) {
    return pipeline.flush(timeout.toMillis());
  }

  /**
   * Flushes within the timeout, then stops. Events still undelivered are written to the spill file
   * when one is configured (sent by the next logger on the same path), else counted as dropped.
   * Returns true when everything was delivered.
   */
  public boolean close(Duration timeout) {
    if (shutdownHook != null) {
      try {
        Runtime.getRuntime().removeShutdownHook(shutdownHook);
      } catch (IllegalStateException alreadyShuttingDown) {
        // the hook is running or will run; closing twice is harmless
      }
    }
    return pipeline.close(timeout.toMillis());
  }

  /** {@link #close(Duration)} with the configured close timeout. */
  @Override
  public void close() {
    close(closeTimeout);
  }

  public Stats stats() {
    return pipeline.stats();
  }

  /** Options. Every one has a default; see the README for what each does. */
  public static final class Builder {
    private final List<Endpoint> servers = new ArrayList<>();
    private boolean tls;
    private SSLContext sslContext;
    private boolean tlsVerifyHostname = true;
    private String sharedKey;
    private String username = "";
    private String password = "";
    private String clientHostname;
    private Duration connectTimeout = Duration.ofSeconds(5);
    private Duration writeTimeout = Duration.ofSeconds(10);
    private long bufferLimit = 32L << 20;
    private int chunkLimit = 256 << 10;
    private Duration flushInterval = Duration.ofMillis(100);
    private Overflow overflow;
    private Path spillPath;
    private long spillLimit = 256L << 20;
    private Duration blockTimeout = Duration.ofSeconds(10);
    private boolean ack;
    private Duration ackTimeout = Duration.ofSeconds(10);
    private int maxInflight = 16;
    private boolean compress;
    private Duration retryInitial = Duration.ofMillis(100);
    private Duration retryMax = Duration.ofSeconds(30);
    private double retryMultiplier = 2.0;
    private double retryJitter = 0.2;
    private Duration primaryRetry = Duration.ofSeconds(5);
    private ErrorHandler errorHandler;
    private Duration closeTimeout = Duration.ofSeconds(10);
    private boolean shutdownHook = true;

    private Builder() {}

    /** Adds a server: "host:port", "tcp://host:port", "tls://host:port", "unix:///path". */
    public Builder server(String address) {
      servers.add(Endpoint.parse(address));
      return this;
    }

    public Builder server(Endpoint endpoint) {
      servers.add(Objects.requireNonNull(endpoint));
      return this;
    }

    /** Servers in order of preference: the first is the primary, the others are failovers. */
    public Builder servers(List<String> addresses) {
      addresses.forEach(this::server);
      return this;
    }

    /** TLS on every TCP server (default off), with the JVM's default trust store. */
    public Builder tls(boolean on) {
      this.tls = on;
      return this;
    }

    /** The TLS context to use (implies nothing by itself; enable TLS with tls() or tls://). */
    public Builder sslContext(SSLContext ctx) {
      this.sslContext = ctx;
      return this;
    }

    /** Check that the server certificate names the host (default true). */
    public Builder tlsVerifyHostname(boolean on) {
      this.tlsVerifyHostname = on;
      return this;
    }

    /** Enables the HELO/PING/PONG handshake with this shared key. */
    public Builder sharedKey(String key) {
      this.sharedKey = key;
      return this;
    }

    /** User authentication inside the handshake (when the server asks for it). */
    public Builder credentials(String username, String password) {
      this.username = Objects.requireNonNull(username);
      this.password = Objects.requireNonNull(password);
      return this;
    }

    /** The hostname sent in PING (default: this machine's name). */
    public Builder clientHostname(String name) {
      this.clientHostname = name;
      return this;
    }

    public Builder connectTimeout(Duration d) {
      this.connectTimeout = d;
      return this;
    }

    /** A write blocked longer than this closes the connection (its frames are resent). */
    public Builder writeTimeout(Duration d) {
      this.writeTimeout = d;
      return this;
    }

    /** Memory buffer size in bytes of encoded events (default 32 MiB). */
    public Builder bufferLimit(long bytes) {
      this.bufferLimit = bytes;
      return this;
    }

    /** Size at which a tag's chunk is sealed and sent as one frame (default 256 KiB). */
    public Builder chunkLimit(int bytes) {
      this.chunkLimit = bytes;
      return this;
    }

    /** How long an event may wait in a partly filled chunk (default 100 ms). */
    public Builder flushInterval(Duration d) {
      this.flushInterval = d;
      return this;
    }

    /** What to do when the memory buffer is full (default SPILL with a spill path, else DROP). */
    public Builder overflow(Overflow o) {
      this.overflow = o;
      return this;
    }

    /** The spill file (also receives what close() could not deliver). */
    public Builder spillPath(Path path) {
      this.spillPath = path;
      return this;
    }

    /** Maximum size of the spill file in bytes (default 256 MiB). */
    public Builder spillLimit(long bytes) {
      this.spillLimit = bytes;
      return this;
    }

    /**
     * In BLOCK mode, how long emit() waits for room before dropping (default 10 s; 0 = forever).
     */
    public Builder blockTimeout(Duration d) {
      this.blockTimeout = d;
      return this;
    }

    /** At-least-once: ask the server to acknowledge every frame, resend what it did not. */
    public Builder ack(boolean on) {
      this.ack = on;
      return this;
    }

    public Builder ackTimeout(Duration d) {
      this.ackTimeout = d;
      return this;
    }

    /** Frames sent and not yet acknowledged, at most (ack mode; default 16). */
    public Builder maxInflight(int n) {
      this.maxInflight = n;
      return this;
    }

    /** Send CompressedPackedForward (gzip) frames. */
    public Builder compress(boolean on) {
      this.compress = on;
      return this;
    }

    /** Reconnect backoff: first delay, cap, growth factor, and jitter (fraction, ±). */
    public Builder retry(Duration initial, Duration max, double multiplier, double jitter) {
      this.retryInitial = initial;
      this.retryMax = max;
      this.retryMultiplier = multiplier;
      this.retryJitter = jitter;
      return this;
    }

    /** While on a failover server, how often to try the primary again (default 5 s). */
    public Builder primaryRetry(Duration d) {
      this.primaryRetry = d;
      return this;
    }

    public Builder errorHandler(ErrorHandler h) {
      this.errorHandler = h;
      return this;
    }

    /** Timeout of close() without argument and of the JVM shutdown hook (default 10 s). */
    public Builder closeTimeout(Duration d) {
      this.closeTimeout = d;
      return this;
    }

    /** Close (and flush) the logger when the JVM exits (default true). */
    public Builder shutdownHook(boolean on) {
      this.shutdownHook = on;
      return this;
    }

    public NagareLogger build() {
      Config c = new Config();
      c.servers =
          servers.isEmpty() ? List.of(Endpoint.tcp("127.0.0.1", 24224)) : List.copyOf(servers);
      c.tls = tls;
      c.sslContext = sslContext;
      c.tlsVerifyHostname = tlsVerifyHostname;
      c.sharedKey = sharedKey;
      c.username = username;
      c.password = password;
      c.clientHostname = clientHostname != null ? clientHostname : localHostname();
      c.connectTimeoutMs = positive(connectTimeout, "connectTimeout");
      c.writeTimeoutMs = positive(writeTimeout, "writeTimeout");
      if (bufferLimit <= 0 || chunkLimit <= 0) {
        throw new IllegalArgumentException("bufferLimit and chunkLimit must be positive");
      }
      c.bufferLimit = bufferLimit;
      c.chunkLimit = chunkLimit;
      c.flushIntervalMs = positive(flushInterval, "flushInterval");
      c.overflow = overflow != null ? overflow : spillPath != null ? Overflow.SPILL : Overflow.DROP;
      if (c.overflow == Overflow.SPILL && spillPath == null) {
        throw new IllegalArgumentException("overflow SPILL needs a spillPath");
      }
      c.spillPath = spillPath;
      c.spillLimit = spillLimit;
      c.blockTimeoutMs = blockTimeout.toMillis();
      c.ack = ack;
      c.ackTimeoutMs = positive(ackTimeout, "ackTimeout");
      c.maxInflight = Math.max(1, maxInflight);
      c.compress = compress;
      c.retryInitialMs = positive(retryInitial, "retry initial");
      c.retryMaxMs = positive(retryMax, "retry max");
      if (retryMultiplier < 1 || retryJitter < 0 || retryJitter >= 1) {
        throw new IllegalArgumentException("retry multiplier must be >= 1, jitter in [0, 1)");
      }
      c.retryMultiplier = retryMultiplier;
      c.retryJitter = retryJitter;
      c.primaryRetryMs = positive(primaryRetry, "primaryRetry");
      c.errorHandler = errorHandler;
      try {
        return new NagareLogger(c, closeTimeout, shutdownHook);
      } catch (IOException e) {
        throw new UncheckedIOException("cannot open spill file " + spillPath, e);
      }
    }

    private static long positive(Duration d, String name) {
      long ms = d.toMillis();
      if (ms <= 0) {
        throw new IllegalArgumentException(name + " must be positive");
      }
      return ms;
    }

    private static String localHostname() {
      try {
        return InetAddress.getLocalHost().getHostName();
      } catch (IOException e) {
        return "localhost";
      }
    }
  }
}
