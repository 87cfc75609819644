package dev.nagare.logger;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.SSLContext;
import org.msgpack.core.MessageInsufficientBufferException;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;

/**
 * A scripted forward server for tests: records every event, answers acks (or withholds some), runs
 * the shared-key handshake, can be stopped and started again on the same port, and serves TCP, TLS
 * or a UNIX socket.
 */
final class TestServer implements AutoCloseable {
  record Event(String tag, EventTime time, Map<String, Object> record) {}

  record FrameInfo(String tag, int count, String chunk, Forward.Mode mode) {}

  private final Path unixPath;
  private final SSLContext ssl;
  private final String sharedKey;
  private int port;
  volatile boolean ack = true;

  /** Delay before each ack is sent. */
  volatile long ackDelayMs;

  /** Frames whose ack is withheld (the first N frames that ask for one). */
  final AtomicInteger withholdAcks = new AtomicInteger();

  final List<Event> events = Collections.synchronizedList(new ArrayList<>());
  final List<FrameInfo> frames = Collections.synchronizedList(new ArrayList<>());
  final AtomicInteger accepted = new AtomicInteger();
  final List<String> errors = new CopyOnWriteArrayList<>();

  private ServerSocket tcp;
  private ServerSocketChannel unix;
  private final List<AutoCloseable> conns = new CopyOnWriteArrayList<>();
  private Thread acceptor;

  private TestServer(int port, Path unixPath, SSLContext ssl, String sharedKey) {
    this.port = port;
    this.unixPath = unixPath;
    this.ssl = ssl;
    this.sharedKey = sharedKey;
  }

  static TestServer tcp() throws IOException {
    return tcp(0);
  }

  static TestServer tcp(int port) throws IOException {
    TestServer s = new TestServer(port, null, null, null);
    s.start();
    return s;
  }

  static TestServer withSharedKey(String key) throws IOException {
    TestServer s = new TestServer(0, null, null, key);
    s.start();
    return s;
  }

  static TestServer tls(SSLContext ctx) throws IOException {
    TestServer s = new TestServer(0, null, ctx, null);
    s.start();
    return s;
  }

  static TestServer unix(Path path) throws IOException {
    TestServer s = new TestServer(0, path, null, null);
    s.start();
    return s;
  }

  /** A port with nothing listening on it (yet). */
  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  int port() {
    return port;
  }

  String address() {
    return unixPath != null ? "unix://" + unixPath : "127.0.0.1:" + port;
  }

  synchronized void start() throws IOException {
    if (unixPath != null) {
      Files.deleteIfExists(unixPath);
      unix = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
      unix.bind(UnixDomainSocketAddress.of(unixPath));
    } else {
      ServerSocket ss;
      // A listener closed a moment ago may still hold the port until its accept thread leaves.
      for (int attempt = 0; ; attempt++) {
        ss = ssl != null ? ssl.getServerSocketFactory().createServerSocket() : new ServerSocket();
        ss.setReuseAddress(true);
        try {
          ss.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 50);
          break;
        } catch (java.net.BindException e) {
          ss.close();
          if (attempt >= 100 || port == 0) {
            throw e;
          }
          try {
            Thread.sleep(20);
          } catch (InterruptedException ie) {
            throw new IOException(ie);
          }
        }
      }
      port = ss.getLocalPort();
      tcp = ss;
    }
    ServerSocket t = tcp;
    ServerSocketChannel u = unix;
    acceptor =
        new Thread(
            () -> {
              while (true) {
                try {
                  if (t != null) {
                    Socket s = t.accept();
                    accepted.incrementAndGet();
                    conns.add(s);
                    serve(s, s.getInputStream(), s.getOutputStream());
                  } else {
                    SocketChannel ch = u.accept();
                    accepted.incrementAndGet();
                    conns.add(ch);
                    serve(ch, Channels.newInputStream(ch), Channels.newOutputStream(ch));
                  }
                } catch (IOException e) {
                  return; // listener closed
                }
              }
            },
            "test-server-accept");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  private void serve(AutoCloseable conn, InputStream in, OutputStream out) {
    Thread th =
        new Thread(
            () -> {
              try (MessageUnpacker u = MessagePack.newDefaultUnpacker(in)) {
                if (sharedKey != null && !handshake(u, out)) {
                  conn.close();
                  return;
                }
                while (true) {
                  Forward.Frame f = Forward.readFrame(u);
                  for (Forward.Entry e : f.entries()) {
                    events.add(new Event(f.tag(), e.time(), e.record()));
                  }
                  String chunk = f.chunk();
                  frames.add(new FrameInfo(f.tag(), f.entries().size(), chunk, f.mode()));
                  if (chunk != null && ack) {
                    if (withholdAcks.getAndUpdate(x -> x > 0 ? x - 1 : 0) > 0) {
                      continue;
                    }
                    if (ackDelayMs > 0) {
                      Thread.sleep(ackDelayMs);
                    }
                    MessagePacker p = MessagePack.newDefaultPacker(out);
                    p.packMapHeader(1).packString("ack").packString(chunk);
                    p.flush();
                  }
                }
              } catch (MessageInsufficientBufferException e) {
                // client closed the connection
              } catch (Exception e) {
                if (!(e instanceof IOException)) {
                  errors.add(e.toString());
                }
              } finally {
                try {
                  conn.close();
                } catch (Exception ignored) {
                  // closing
                }
              }
            },
            "test-server-conn");
    th.setDaemon(true);
    th.start();
  }

  private boolean handshake(MessageUnpacker u, OutputStream out) throws IOException {
    byte[] nonce = new byte[16];
    new SecureRandom().nextBytes(nonce);
    out.write(Handshake.encodeHelo(new Handshake.Helo(nonce, new byte[0], true)));
    out.flush();
    Handshake.Ping ping = Handshake.parsePing(u.unpackValue());
    String want =
        Handshake.pingDigest(ping.sharedKeySalt(), ping.clientHostname(), nonce, sharedKey);
    if (!want.equals(ping.digest())) {
      out.write(
          Handshake.encodePong(
              new Handshake.Pong(false, "shared key mismatch", "test-server", "")));
      out.flush();
      return false;
    }
    String digest = Handshake.pongDigest(ping.sharedKeySalt(), "test-server", nonce, sharedKey);
    out.write(Handshake.encodePong(new Handshake.Pong(true, "", "test-server", digest)));
    out.flush();
    return true;
  }

  /** Closes the listener and every connection (a server going away). */
  synchronized void stop() throws IOException {
    if (tcp != null) {
      tcp.close();
      tcp = null;
    }
    if (unix != null) {
      unix.close();
      unix = null;
    }
    for (AutoCloseable c : conns) {
      try {
        c.close();
      } catch (Exception ignored) {
        // closing
      }
    }
    conns.clear();
  }

  List<Event> snapshot() {
    synchronized (events) {
      return new ArrayList<>(events);
    }
  }

  /** The "seq" fields of the received events of one tag, in arrival order. */
  List<Long> seqs(String tag) {
    List<Long> out = new ArrayList<>();
    for (Event e : snapshot()) {
      if (e.tag().equals(tag)) {
        out.add(((Number) e.record().get("seq")).longValue());
      }
    }
    return out;
  }

  /** Waits until at least n events arrived; returns the count. */
  int awaitEvents(int n, long timeoutMs) throws InterruptedException {
    long end = System.currentTimeMillis() + timeoutMs;
    while (events.size() < n && System.currentTimeMillis() < end) {
      Thread.sleep(10);
    }
    return events.size();
  }

  @Override
  public void close() throws IOException {
    stop();
  }
}
