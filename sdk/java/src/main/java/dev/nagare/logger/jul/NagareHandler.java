package dev.nagare.logger.jul;

import dev.nagare.logger.NagareLogger;
import dev.nagare.logger.Overflow;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.logging.ErrorManager;
import java.util.logging.Handler;
import java.util.logging.LogManager;
import java.util.logging.LogRecord;
import java.util.logging.SimpleFormatter;

/**
 * A java.util.logging handler that sends each record to nagare as {@code {"level", "logger",
 * "thread", "message", ["exception"]}} with the record's time.
 *
 * <p>Configured from logging.properties (all optional):
 *
 * <pre>
 * handlers = dev.nagare.logger.jul.NagareHandler
 * dev.nagare.logger.jul.NagareHandler.tag = app
 * dev.nagare.logger.jul.NagareHandler.servers = 127.0.0.1:24224
 * dev.nagare.logger.jul.NagareHandler.sharedKey = secret
 * dev.nagare.logger.jul.NagareHandler.ack = true
 * dev.nagare.logger.jul.NagareHandler.spillPath = /var/tmp/app.spill
 * dev.nagare.logger.jul.NagareHandler.overflow = spill
 * dev.nagare.logger.jul.NagareHandler.level = INFO
 * </pre>
 *
 * or built around an existing logger with {@link #NagareHandler(NagareLogger, String)}.
 */
public class NagareHandler extends Handler {
  private final NagareLogger logger;
  private final String tag;
  private final boolean owned;
  private final SimpleFormatter messageFormatter = new SimpleFormatter();

  /** Reads its settings from the LogManager (logging.properties). */
  public NagareHandler() {
    LogManager m = LogManager.getLogManager();
    String p = NagareHandler.class.getName() + ".";
    this.tag = prop(m, p + "tag", "app");
    NagareLogger.Builder b = NagareLogger.builder();
    for (String s : prop(m, p + "servers", "127.0.0.1:24224").split("[,\\s]+")) {
      if (!s.isBlank()) {
        b.server(s);
      }
    }
    String key = m.getProperty(p + "sharedKey");
    if (key != null) {
      b.sharedKey(key);
    }
    b.tls(Boolean.parseBoolean(prop(m, p + "tls", "false")));
    b.ack(Boolean.parseBoolean(prop(m, p + "ack", "false")));
    b.compress(Boolean.parseBoolean(prop(m, p + "compress", "false")));
    String bufferLimit = m.getProperty(p + "bufferLimit");
    if (bufferLimit != null) { // else the default all six libraries share (sdk/README.md)
      b.bufferLimit(Long.parseLong(bufferLimit.trim()));
    }
    String spill = m.getProperty(p + "spillPath");
    if (spill != null) {
      b.spillPath(Path.of(spill));
    }
    String overflow = m.getProperty(p + "overflow");
    if (overflow != null) {
      b.overflow(Overflow.parse(overflow));
    }
    b.errorHandler(e -> reportError(e.getMessage(), e, ErrorManager.WRITE_FAILURE));
    this.logger = b.build();
    this.owned = true;
    String level = m.getProperty(p + "level");
    if (level != null) {
      setLevel(java.util.logging.Level.parse(level.trim()));
    }
  }

  /** Sends through an existing logger; {@link #close()} does not close it. */
  public NagareHandler(NagareLogger logger, String tag) {
    this.logger = logger;
    this.tag = tag;
    this.owned = false;
  }

  private static String prop(LogManager m, String key, String dflt) {
    String v = m.getProperty(key);
    return v == null ? dflt : v.trim();
  }

  @Override
  public void publish(LogRecord rec) {
    if (!isLoggable(rec)) {
      return;
    }
    if (rec.getLoggerName() != null && rec.getLoggerName().startsWith("dev.nagare.logger")) {
      return;
    }
    Map<String, Object> r = new LinkedHashMap<>();
    r.put("level", rec.getLevel().getName());
    r.put("logger", rec.getLoggerName());
    r.put("thread", rec.getLongThreadID());
    r.put("message", messageFormatter.formatMessage(rec));
    Throwable t = rec.getThrown();
    if (t != null) {
      StringWriter sw = new StringWriter();
      t.printStackTrace(new PrintWriter(sw));
      r.put("exception", sw.toString());
    }
    logger.emit(tag, r, rec.getInstant());
  }

  @Override
  public void flush() {
    logger.flush(Duration.ofSeconds(10));
  }

  @Override
  public void close() {
    if (owned) {
      logger.close();
    } else {
      logger.flush(Duration.ofSeconds(10));
    }
  }

  public NagareLogger logger() {
    return logger;
  }
}
