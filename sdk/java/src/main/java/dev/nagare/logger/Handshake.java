package dev.nagare.logger;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;
import org.msgpack.value.ArrayValue;
import org.msgpack.value.MapValue;
import org.msgpack.value.Value;

/**
 * The shared-key handshake of forward protocol v1: HELO (server), PING (client), PONG (server).
 * Nonces and salts are raw bytes, whether they arrive as msgpack str or bin.
 */
public final class Handshake {
  private Handshake() {}

  /** The server's greeting. */
  public record Helo(byte[] nonce, byte[] auth, boolean keepalive) {}

  /** The client's answer. */
  public record Ping(
      String clientHostname,
      byte[] sharedKeySalt,
      String digest,
      String username,
      String passwordDigest) {}

  /** The server's verdict. */
  public record Pong(boolean authOk, String reason, String serverHostname, String digest) {}

  /** Failed handshake: bad PONG, authentication refused, or an unexpected message. */
  public static final class HandshakeException extends IOException {
    private static final long serialVersionUID = 1L;

    public HandshakeException(String message) {
      super(message);
    }
  }

  private static final HexFormat HEX = HexFormat.of();

  private static String sha512Hex(byte[]... parts) {
    try {
      MessageDigest md = MessageDigest.getInstance("SHA-512");
      for (byte[] p : parts) {
        md.update(p);
      }
      return HEX.formatHex(md.digest());
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** hex(sha512(shared_key_salt + client_hostname + nonce + shared_key)). */
  public static String pingDigest(
      byte[] sharedKeySalt, String clientHostname, byte[] nonce, String sharedKey) {
    return sha512Hex(sharedKeySalt, utf8(clientHostname), nonce, utf8(sharedKey));
  }

  /** hex(sha512(auth_salt + username + password)), or "" when the auth salt is empty. */
  public static String passwordDigest(byte[] authSalt, String username, String password) {
    if (authSalt == null || authSalt.length == 0) {
      return "";
    }
    return sha512Hex(authSalt, utf8(username), utf8(password));
  }

  /** hex(sha512(shared_key_salt + server_hostname + nonce + shared_key)). */
  public static String pongDigest(
      byte[] sharedKeySalt, String serverHostname, byte[] nonce, String sharedKey) {
    return sha512Hex(sharedKeySalt, utf8(serverHostname), nonce, utf8(sharedKey));
  }

  /** Builds the PING that answers a HELO. */
  public static Ping ping(
      Helo helo,
      String clientHostname,
      byte[] sharedKeySalt,
      String sharedKey,
      String username,
      String password) {
    boolean auth = helo.auth() != null && helo.auth().length > 0;
    String user = auth && username != null ? username : "";
    String pw = password == null ? "" : password;
    return new Ping(
        clientHostname,
        sharedKeySalt,
        pingDigest(sharedKeySalt, clientHostname, helo.nonce(), sharedKey),
        user,
        auth ? passwordDigest(helo.auth(), user, pw) : "");
  }

  /** {@code ["PING", hostname, salt, digest, username, password_digest]}, all as msgpack str. */
  public static byte[] encodePing(Ping ping) {
    return Forward.pack(
        256,
        (sink, p) -> {
          p.packArrayHeader(6);
          p.packString("PING");
          p.packString(ping.clientHostname());
          p.packRawStringHeader(ping.sharedKeySalt().length);
          p.writePayload(ping.sharedKeySalt());
          p.packString(ping.digest());
          p.packString(ping.username());
          p.packString(ping.passwordDigest());
        });
  }

  /** {@code ["HELO", {"nonce": bin, "auth": bin, "keepalive": bool}]} (for test servers). */
  public static byte[] encodeHelo(Helo helo) {
    return Forward.pack(
        128,
        (sink, p) -> {
          p.packArrayHeader(2);
          p.packString("HELO");
          p.packMapHeader(3);
          p.packString("nonce");
          p.packBinaryHeader(helo.nonce().length);
          p.writePayload(helo.nonce());
          p.packString("auth");
          p.packBinaryHeader(helo.auth().length);
          p.writePayload(helo.auth());
          p.packString("keepalive");
          p.packBoolean(helo.keepalive());
        });
  }

  /** {@code ["PONG", auth_ok, reason, server_hostname, digest]} (for test servers). */
  public static byte[] encodePong(Pong pong) {
    return Forward.pack(
        256,
        (sink, p) -> {
          p.packArrayHeader(5);
          p.packString("PONG");
          p.packBoolean(pong.authOk());
          p.packString(pong.reason());
          p.packString(pong.serverHostname());
          p.packString(pong.digest());
        });
  }

  private static List<Value> expect(Value v, String kind, int minSize) throws HandshakeException {
    if (!v.isArrayValue()) {
      throw new HandshakeException("expected " + kind + ", got " + v);
    }
    ArrayValue a = v.asArrayValue();
    if (a.size() < minSize || !a.get(0).isRawValue() || !kind.equals(a.get(0).toString())) {
      throw new HandshakeException("expected " + kind + ", got " + v);
    }
    return a.list();
  }

  private static byte[] raw(Value v) {
    if (v == null || v.isNilValue()) {
      return new byte[0];
    }
    if (v.isRawValue()) {
      return v.asRawValue().asByteArray();
    }
    return v.toString().getBytes(StandardCharsets.UTF_8);
  }

  private static String str(Value v) {
    return v.isRawValue() ? new String(v.asRawValue().asByteArray(), StandardCharsets.UTF_8) : "";
  }

  public static Helo parseHelo(Value v) throws HandshakeException {
    List<Value> a = expect(v, "HELO", 2);
    if (!a.get(1).isMapValue()) {
      throw new HandshakeException("HELO options are not a map");
    }
    MapValue m = a.get(1).asMapValue();
    byte[] nonce = null;
    byte[] auth = new byte[0];
    boolean keepalive = true;
    for (var e : m.entrySet()) {
      String k = e.getKey().isRawValue() ? str(e.getKey()) : e.getKey().toString();
      switch (k) {
        case "nonce" -> nonce = raw(e.getValue());
        case "auth" -> auth = raw(e.getValue());
        case "keepalive" ->
            keepalive =
                !e.getValue().isBooleanValue() || e.getValue().asBooleanValue().getBoolean();
        default -> {}
      }
    }
    if (nonce == null) {
      throw new HandshakeException("HELO without nonce");
    }
    return new Helo(nonce, auth, keepalive);
  }

  public static Ping parsePing(Value v) throws HandshakeException {
    List<Value> a = expect(v, "PING", 6);
    return new Ping(str(a.get(1)), raw(a.get(2)), str(a.get(3)), str(a.get(4)), str(a.get(5)));
  }

  public static Pong parsePong(Value v) throws HandshakeException {
    List<Value> a = expect(v, "PONG", 5);
    boolean ok = a.get(1).isBooleanValue() && a.get(1).asBooleanValue().getBoolean();
    return new Pong(ok, str(a.get(2)), str(a.get(3)), str(a.get(4)));
  }

  /** Checks the server's verdict and its digest; throws when either is wrong. */
  public static void verifyPong(Pong pong, byte[] sharedKeySalt, byte[] nonce, String sharedKey)
      throws HandshakeException {
    if (!pong.authOk()) {
      throw new HandshakeException("server refused authentication: " + pong.reason());
    }
    String want = pongDigest(sharedKeySalt, pong.serverHostname(), nonce, sharedKey);
    if (!MessageDigest.isEqual(
        want.getBytes(StandardCharsets.US_ASCII),
        pong.digest().getBytes(StandardCharsets.US_ASCII))) {
      throw new HandshakeException("PONG digest does not match: wrong shared key?");
    }
  }
}
