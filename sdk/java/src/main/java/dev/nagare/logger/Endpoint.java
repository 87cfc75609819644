package dev.nagare.logger;

import java.nio.file.Path;

/**
 * A server address: TCP ({@code host:port}, {@code tcp://host:port}, {@code [::1]:port}), TCP with
 * TLS ({@code tls://host:port}) or a UNIX socket ({@code unix:///path/to.sock}).
 */
public record Endpoint(String host, int port, Path unixPath, boolean tls) {

  public static Endpoint tcp(String host, int port) {
    return new Endpoint(host, port, null, false);
  }

  public static Endpoint tls(String host, int port) {
    return new Endpoint(host, port, null, true);
  }

  public static Endpoint unix(Path path) {
    return new Endpoint(null, 0, path, false);
  }

  public boolean isUnix() {
    return unixPath != null;
  }

  /** Parses one of the forms in the class comment; the default port is 24224. */
  public static Endpoint parse(String s) {
    String spec = s.trim();
    if (spec.startsWith("unix://")) {
      return unix(Path.of(spec.substring("unix://".length())));
    }
    boolean tls = false;
    if (spec.startsWith("tls://")) {
      tls = true;
      spec = spec.substring(6);
    } else if (spec.startsWith("tcp://")) {
      spec = spec.substring(6);
    }
    String host;
    int port = 24224;
    if (spec.startsWith("[")) {
      int end = spec.indexOf(']');
      if (end < 0) {
        throw new IllegalArgumentException("bad server address: " + s);
      }
      host = spec.substring(1, end);
      String rest = spec.substring(end + 1);
      if (rest.startsWith(":")) {
        port = parsePort(rest.substring(1), s);
      } else if (!rest.isEmpty()) {
        throw new IllegalArgumentException("bad server address: " + s);
      }
    } else {
      int colon = spec.lastIndexOf(':');
      if (colon >= 0 && spec.indexOf(':') == colon) {
        host = spec.substring(0, colon);
        port = parsePort(spec.substring(colon + 1), s);
      } else {
        host = spec;
      }
    }
    if (host.isEmpty()) {
      throw new IllegalArgumentException("bad server address: " + s);
    }
    return new Endpoint(host, port, null, tls);
  }

  private static int parsePort(String p, String whole) {
    try {
      int port = Integer.parseInt(p);
      if (port < 1 || port > 65535) {
        throw new NumberFormatException();
      }
      return port;
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("bad port in server address: " + whole);
    }
  }

  @Override
  public String toString() {
    if (unixPath != null) {
      return "unix://" + unixPath;
    }
    String h = host.indexOf(':') >= 0 ? "[" + host + "]" : host;
    return (tls ? "tls://" : "") + h + ":" + port;
  }
}
