package dev.nagare.logger;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import org.msgpack.core.MessageInsufficientBufferException;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;

/**
 * One connection to one server: TCP (optionally TLS) or a UNIX socket. A reader thread reads what
 * the server sends (acks) and notices the server closing the connection, so the sender never writes
 * into a connection the peer has already closed.
 */
final class Connection {
  interface Listener {
    void onAck(Connection c, String id);

    void onBroken(Connection c, Throwable cause);
  }

  static final ScheduledThreadPoolExecutor WATCHDOG;

  static {
    WATCHDOG =
        new ScheduledThreadPoolExecutor(
            1,
            r -> {
              Thread t = new Thread(r, "nagare-watchdog");
              t.setDaemon(true);
              return t;
            });
    WATCHDOG.setRemoveOnCancelPolicy(true);
  }

  private static final SecureRandom RANDOM = new SecureRandom();

  final Endpoint endpoint;
  final int index;
  private final Socket socket; // TCP or TLS
  private final SocketChannel channel; // UNIX
  private final InputStream in;
  private final OutputStream out;
  private volatile boolean broken;
  private volatile Throwable cause;
  private Thread reader;

  private Connection(Endpoint ep, int index, Socket socket, SocketChannel channel)
      throws IOException {
    this.endpoint = ep;
    this.index = index;
    this.socket = socket;
    this.channel = channel;
    if (socket != null) {
      in = socket.getInputStream();
      out = socket.getOutputStream();
    } else {
      in = new ChannelIn(channel);
      out = null;
    }
  }

  /** Connects, runs the TLS and shared-key handshakes, and starts the reader thread. */
  static Connection open(Config cfg, Endpoint ep, int index, Listener listener) throws IOException {
    Connection c;
    if (ep.isUnix()) {
      SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
      try {
        ch.connect(UnixDomainSocketAddress.of(ep.unixPath()));
      } catch (IOException e) {
        ch.close();
        throw e;
      }
      c = new Connection(ep, index, null, ch);
    } else {
      Socket s = new Socket();
      try {
        s.setTcpNoDelay(true);
        s.setKeepAlive(true);
        s.connect(new InetSocketAddress(ep.host(), ep.port()), (int) cfg.connectTimeoutMs);
        if (ep.tls() || cfg.tls) {
          SSLContext ctx = cfg.sslContext != null ? cfg.sslContext : SSLContext.getDefault();
          SSLSocket ssl =
              (SSLSocket) ctx.getSocketFactory().createSocket(s, ep.host(), ep.port(), true);
          if (cfg.tlsVerifyHostname) {
            SSLParameters p = ssl.getSSLParameters();
            p.setEndpointIdentificationAlgorithm("HTTPS");
            ssl.setSSLParameters(p);
          }
          ssl.setSoTimeout((int) cfg.connectTimeoutMs);
          ssl.startHandshake();
          ssl.setSoTimeout(0);
          s = ssl;
        }
      } catch (IOException | java.security.NoSuchAlgorithmException e) {
        s.close();
        throw e instanceof IOException io ? io : new IOException(e);
      }
      c = new Connection(ep, index, s, null);
    }
    try {
      MessageUnpacker u = MessagePack.newDefaultUnpacker(c.in);
      if (cfg.sharedKey != null) {
        c.handshake(cfg, u);
      }
      c.startReader(u, listener);
      return c;
    } catch (IOException | RuntimeException e) {
      c.close();
      throw e;
    }
  }

  private void handshake(Config cfg, MessageUnpacker u) throws IOException {
    ScheduledFuture<?> timer =
        WATCHDOG.schedule(this::close, cfg.connectTimeoutMs, TimeUnit.MILLISECONDS);
    try {
      Value heloValue;
      try {
        heloValue = u.unpackValue();
      } catch (MessageInsufficientBufferException e) {
        throw new Handshake.HandshakeException("connection closed before HELO");
      }
      Handshake.Helo helo = Handshake.parseHelo(heloValue);
      byte[] salt = new byte[16];
      RANDOM.nextBytes(salt);
      salt = HexFormat.of().formatHex(salt).getBytes(StandardCharsets.US_ASCII);
      Handshake.Ping ping =
          Handshake.ping(helo, cfg.clientHostname, salt, cfg.sharedKey, cfg.username, cfg.password);
      write(Handshake.encodePing(ping), 0, -1, cfg.writeTimeoutMs);
      Value pongValue;
      try {
        pongValue = u.unpackValue();
      } catch (MessageInsufficientBufferException e) {
        throw new Handshake.HandshakeException(
            "connection closed after PING (shared key or credentials refused?)");
      }
      Handshake.Pong pong = Handshake.parsePong(pongValue);
      Handshake.verifyPong(pong, salt, helo.nonce(), cfg.sharedKey);
    } finally {
      timer.cancel(false);
    }
  }

  private void startReader(MessageUnpacker u, Listener listener) {
    reader =
        new Thread(
            () -> {
              Throwable why = null;
              try {
                while (true) {
                  Value v = u.unpackValue();
                  if (v.isMapValue()) {
                    for (var e : v.asMapValue().entrySet()) {
                      if (e.getKey().isRawValue()
                          && "ack".equals(e.getKey().toString())
                          && e.getValue().isRawValue()) {
                        listener.onAck(this, e.getValue().toString());
                      }
                    }
                  } else if (v.isArrayValue()
                      && v.asArrayValue().size() > 0
                      && "HELO".equals(v.asArrayValue().get(0).toString())) {
                    throw new Handshake.HandshakeException(
                        "server requires a shared key (sent HELO); configure sharedKey");
                  }
                }
              } catch (MessageInsufficientBufferException e) {
                why = new IOException("connection closed by server");
              } catch (Throwable t) {
                why = t;
              }
              markBroken(why);
              listener.onBroken(this, why);
            },
            "nagare-reader-" + endpoint);
    reader.setDaemon(true);
    reader.start();
  }

  boolean isBroken() {
    return broken;
  }

  Throwable cause() {
    return cause;
  }

  void markBroken(Throwable why) {
    if (!broken) {
      cause = why;
      broken = true;
    }
  }

  /** Writes bytes; a write blocked longer than the timeout closes the connection. */
  void write(byte[] b, int off, int end, long timeoutMs) throws IOException {
    if (broken) {
      Throwable c = cause;
      throw new IOException(
          "connection already closed" + (c != null ? ": " + c.getMessage() : ""), c);
    }
    int len = (end < 0 ? b.length : end) - off;
    ScheduledFuture<?> timer = WATCHDOG.schedule(this::close, timeoutMs, TimeUnit.MILLISECONDS);
    try {
      if (out != null) {
        out.write(b, off, len);
      } else {
        ByteBuffer bb = ByteBuffer.wrap(b, off, len);
        while (bb.hasRemaining()) {
          channel.write(bb);
        }
      }
    } catch (IOException e) {
      markBroken(e);
      throw e;
    } finally {
      timer.cancel(false);
    }
  }

  void close() {
    markBroken(new IOException("closed by client"));
    try {
      if (socket != null) {
        socket.close();
      } else {
        channel.close();
      }
    } catch (IOException ignored) {
      // closing anyway
    }
  }

  /** Blocking reads straight from the channel (separate from writes, unlike Channels streams). */
  private static final class ChannelIn extends InputStream {
    private final SocketChannel ch;

    ChannelIn(SocketChannel ch) {
      this.ch = ch;
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      int n = read(one, 0, 1);
      return n < 0 ? -1 : one[0] & 0xFF;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (len == 0) {
        return 0;
      }
      return ch.read(ByteBuffer.wrap(b, off, len));
    }
  }
}
