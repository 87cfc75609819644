package dev.nagare.logger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ch.qos.logback.classic.LoggerContext;
import dev.nagare.logger.jul.NagareHandler;
import dev.nagare.logger.logback.NagareAppender;
import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.logging.Level;
import java.util.logging.LogManager;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The Logback appender and the java.util.logging handler. */
@Timeout(60)
class IntegrationTest {

  @Test
  void logbackAppender() throws Exception {
    try (TestServer srv = TestServer.tcp()) {
      LoggerContext ctx = (LoggerContext) org.slf4j.LoggerFactory.getILoggerFactory();
      NagareAppender app = new NagareAppender();
      app.setContext(ctx);
      app.setServers(srv.address());
      app.setTag("app.logback");
      app.setAck(true);
      app.setFlushIntervalMillis(20);
      app.start();
      assertTrue(app.isStarted());
      ch.qos.logback.classic.Logger log = ctx.getLogger("test.orders");
      log.setAdditive(false);
      log.addAppender(app);
      org.slf4j.MDC.put("requestId", "r-42");
      org.slf4j.Logger slf = org.slf4j.LoggerFactory.getLogger("test.orders");
      slf.info("order {} placed", 7);
      org.slf4j.MDC.clear();
      log.error("payment failed", new IllegalStateException("card declined"));
      log.debug("debug is below the default level? no: context default is DEBUG");
      app.stop();
      List<TestServer.Event> ev = srv.snapshot();
      assertEquals(3, ev.size(), "events: " + ev);
      TestServer.Event first = ev.get(0);
      assertEquals("app.logback", first.tag());
      assertEquals("INFO", first.record().get("level"));
      assertEquals("test.orders", first.record().get("logger"));
      assertEquals("order 7 placed", first.record().get("message"));
      assertEquals("r-42", first.record().get("requestId"));
      assertEquals(Thread.currentThread().getName(), first.record().get("thread"));
      long age = System.currentTimeMillis() / 1000 - first.time().seconds();
      assertTrue(age >= 0 && age < 60, "time is the event's time");
      TestServer.Event second = ev.get(1);
      assertEquals("ERROR", second.record().get("level"));
      assertTrue(((String) second.record().get("exception")).contains("card declined"));
    }
  }

  @Test
  void julHandlerAroundALogger() throws Exception {
    try (TestServer srv = TestServer.tcp();
        NagareLogger nl =
            NagareLogger.builder()
                .server(srv.address())
                .ack(true)
                .flushInterval(Duration.ofMillis(20))
                .shutdownHook(false)
                .build()) {
      NagareHandler h = new NagareHandler(nl, "app.jul");
      Logger jl = Logger.getLogger("test.jul.wrapped");
      jl.setUseParentHandlers(false);
      jl.addHandler(h);
      jl.info("hello jul");
      jl.log(Level.WARNING, "bad {0}", "thing");
      jl.log(Level.SEVERE, "crash", new RuntimeException("kaboom"));
      h.flush();
      jl.removeHandler(h);
      List<TestServer.Event> ev = srv.snapshot();
      assertEquals(3, ev.size());
      assertEquals("app.jul", ev.get(0).tag());
      assertEquals("INFO", ev.get(0).record().get("level"));
      assertEquals("hello jul", ev.get(0).record().get("message"));
      assertEquals("bad thing", ev.get(1).record().get("message"));
      assertTrue(((String) ev.get(2).record().get("exception")).contains("kaboom"));
    }
  }

  @Test
  void julHandlerFromLoggingProperties() throws Exception {
    try (TestServer srv = TestServer.tcp()) {
      String props =
          "dev.nagare.logger.jul.NagareHandler.tag = app.props\n"
              + "dev.nagare.logger.jul.NagareHandler.servers = "
              + srv.address()
              + "\n"
              + "dev.nagare.logger.jul.NagareHandler.ack = true\n"
              + "dev.nagare.logger.jul.NagareHandler.level = WARNING\n";
      LogManager.getLogManager()
          .readConfiguration(new ByteArrayInputStream(props.getBytes(StandardCharsets.UTF_8)));
      NagareHandler h = new NagareHandler();
      try {
        Logger jl = Logger.getLogger("test.jul.props");
        jl.setUseParentHandlers(false);
        jl.addHandler(h);
        jl.info("filtered out by the handler level");
        jl.warning("kept");
        jl.removeHandler(h);
      } finally {
        h.close();
        LogManager.getLogManager().reset();
      }
      List<TestServer.Event> ev = srv.snapshot();
      assertEquals(1, ev.size());
      assertEquals("app.props", ev.get(0).tag());
      assertEquals("kept", ev.get(0).record().get("message"));
    }
  }
}
