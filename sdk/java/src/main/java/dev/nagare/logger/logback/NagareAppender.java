package dev.nagare.logger.logback;

import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.classic.spi.IThrowableProxy;
import ch.qos.logback.classic.spi.ThrowableProxyUtil;
import ch.qos.logback.core.UnsynchronizedAppenderBase;
import dev.nagare.logger.NagareLogger;
import dev.nagare.logger.Overflow;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A Logback appender that sends each logging event to nagare as one record:
 *
 * <pre>{"level", "logger", "thread", "message", ["exception"], [MDC keys...]}</pre>
 *
 * with the tag {@code <tag>} (or {@code <tag>.<logger name>} when {@code tagWithLogger} is true)
 * and the event's time in nanoseconds.
 *
 * <pre>{@code
 * <appender name="NAGARE" class="dev.nagare.logger.logback.NagareAppender">
 *   <tag>app</tag>
 *   <servers>127.0.0.1:24224,127.0.0.1:24225</servers>
 *   <spillPath>/var/tmp/app.spill</spillPath>
 *   <ack>true</ack>
 * </appender>
 * }</pre>
 *
 * Events the logger itself produces (its error handler goes to Logback's status manager) are not
 * sent, so a logging loop cannot occur.
 */
public class NagareAppender extends UnsynchronizedAppenderBase<ILoggingEvent> {
  private String tag = "app";
  private boolean tagWithLogger;
  private String servers = "127.0.0.1:24224";
  private String sharedKey;
  private String username;
  private String password;
  private boolean tls;
  private boolean ack;
  private long ackTimeoutMillis = 10_000;
  private boolean compress;
  // null: the builder's default, the one all six libraries share (sdk/README.md)
  private Long bufferLimit;
  private int chunkLimit = 256 << 10;
  private long flushIntervalMillis = 100;
  private String overflow;
  private String spillPath;
  private Long spillLimit;
  private long closeTimeoutMillis = 10_000;
  private boolean includeMdc = true;
  private NagareLogger logger;
  private boolean owned;

  /** Use an existing logger instead of building one from the properties (stop() flushes it). */
  public void setLogger(NagareLogger logger) {
    this.logger = logger;
  }

  public NagareLogger getLogger() {
    return logger;
  }

  @Override
  public void start() {
    if (logger == null) {
      try {
        NagareLogger.Builder b = NagareLogger.builder();
        for (String s : servers.split("[,\\s]+")) {
          if (!s.isBlank()) {
            b.server(s);
          }
        }
        b.tls(tls)
            .ack(ack)
            .ackTimeout(Duration.ofMillis(ackTimeoutMillis))
            .compress(compress)
            .chunkLimit(chunkLimit)
            .flushInterval(Duration.ofMillis(flushIntervalMillis))
            .closeTimeout(Duration.ofMillis(closeTimeoutMillis))
            .shutdownHook(false)
            .errorHandler(e -> addWarn("nagare: " + e.getMessage()));
        if (bufferLimit != null) {
          b.bufferLimit(bufferLimit);
        }
        if (spillLimit != null) {
          b.spillLimit(spillLimit);
        }
        if (sharedKey != null) {
          b.sharedKey(sharedKey);
        }
        if (username != null) {
          b.credentials(username, password == null ? "" : password);
        }
        if (spillPath != null) {
          b.spillPath(Path.of(spillPath));
        }
        if (overflow != null) {
          b.overflow(Overflow.parse(overflow));
        }
        logger = b.build();
        owned = true;
      } catch (RuntimeException e) {
        addError("nagare appender: bad configuration: " + e.getMessage(), e);
        return;
      }
    }
    super.start();
  }

  @Override
  public void stop() {
    super.stop();
    if (logger != null && owned) {
      logger.close(Duration.ofMillis(closeTimeoutMillis));
      logger = null;
      owned = false;
    } else if (logger != null) {
      logger.flush(Duration.ofMillis(closeTimeoutMillis));
    }
  }

  @Override
  protected void append(ILoggingEvent e) {
    if (e.getLoggerName() != null && e.getLoggerName().startsWith("dev.nagare.logger")) {
      return;
    }
    Map<String, Object> r = new LinkedHashMap<>();
    r.put("level", e.getLevel().toString());
    r.put("logger", e.getLoggerName());
    r.put("thread", e.getThreadName());
    r.put("message", e.getFormattedMessage());
    IThrowableProxy tp = e.getThrowableProxy();
    if (tp != null) {
      r.put("exception", ThrowableProxyUtil.asString(tp));
    }
    if (includeMdc) {
      Map<String, String> mdc = e.getMDCPropertyMap();
      if (mdc != null) {
        for (Map.Entry<String, String> m : mdc.entrySet()) {
          r.putIfAbsent(m.getKey(), m.getValue());
        }
      }
    }
    Instant t = e.getInstant();
    String fullTag = tagWithLogger ? tag + "." + e.getLoggerName() : tag;
    logger.emit(fullTag, r, t != null ? t : Instant.ofEpochMilli(e.getTimeStamp()));
  }

  public void setTag(String tag) {
    this.tag = tag;
  }

  public void setTagWithLogger(boolean on) {
    this.tagWithLogger = on;
  }

  /** Comma-separated server addresses, primary first. */
  public void setServers(String servers) {
    this.servers = servers;
  }

  public void setSharedKey(String sharedKey) {
    this.sharedKey = sharedKey;
  }

  public void setUsername(String username) {
    this.username = username;
  }

  public void setPassword(String password) {
    this.password = password;
  }

  public void setTls(boolean tls) {
    this.tls = tls;
  }

  public void setAck(boolean ack) {
    this.ack = ack;
  }

  public void setAckTimeoutMillis(long ms) {
    this.ackTimeoutMillis = ms;
  }

  public void setCompress(boolean compress) {
    this.compress = compress;
  }

  public void setBufferLimit(long bytes) {
    this.bufferLimit = bytes;
  }

  public void setChunkLimit(int bytes) {
    this.chunkLimit = bytes;
  }

  public void setFlushIntervalMillis(long ms) {
    this.flushIntervalMillis = ms;
  }

  /** "spill", "block" or "drop". */
  public void setOverflow(String overflow) {
    this.overflow = overflow;
  }

  public void setSpillPath(String spillPath) {
    this.spillPath = spillPath;
  }

  public void setSpillLimit(long bytes) {
    this.spillLimit = bytes;
  }

  public void setCloseTimeoutMillis(long ms) {
    this.closeTimeoutMillis = ms;
  }

  public void setIncludeMdc(boolean on) {
    this.includeMdc = on;
  }
}
