package dev.nagare.logger;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Collection;
import java.util.Map;

/**
 * Writes Java values as msgpack straight into a {@link ByteSink}: the encoder of emit().
 *
 * <p>It writes the same bytes as msgpack-core's default packer (smallest int forms, str8, float64;
 * the shared vectors check it) without going through a packer: msgpack-core copies every string
 * through a temporary array and {@code Unsafe.copyMemory} with its checks, which was the largest
 * part of emit()'s cost. Short ASCII strings (nearly every key) are copied char by char into the
 * sink; any other string is encoded with {@code String.getBytes(UTF_8)}, which replaces an unpaired
 * surrogate with '?' as msgpack-core does.
 */
final class RecordWriter {
  private RecordWriter() {}

  /** Writes one value (the mapping is in {@link Forward}'s class comment). */
  static void value(ByteSink s, Object v) {
    if (v == null) {
      s.put((byte) 0xc0);
    } else if (v instanceof String str) {
      string(s, str);
    } else if (v instanceof Integer i) {
      integer(s, i);
    } else if (v instanceof Long l) {
      integer(s, l);
    } else if (v instanceof Boolean b) {
      s.put(b ? (byte) 0xc3 : (byte) 0xc2);
    } else if (v instanceof Double d) {
      float64(s, d);
    } else if (v instanceof Map<?, ?> m) {
      map(s, m);
    } else if (v instanceof Float f) {
      float64(s, f.doubleValue());
    } else if (v instanceof Short sh) {
      integer(s, sh);
    } else if (v instanceof Byte b) {
      integer(s, b);
    } else if (v instanceof BigInteger bi) {
      bigInteger(s, bi);
    } else if (v instanceof byte[] bytes) {
      binary(s, bytes);
    } else if (v instanceof Collection<?> c) {
      arrayHeader(s, c.size());
      for (Object o : c) {
        value(s, o);
      }
    } else if (v instanceof Object[] arr) {
      arrayHeader(s, arr.length);
      for (Object o : arr) {
        value(s, o);
      }
    } else if (v instanceof EventTime t) {
      s.ensure(10);
      EventTime.write(s.buf, s.len, t.seconds(), t.nanos());
      s.len += 10;
    } else if (v instanceof Instant i) {
      string(s, i.toString());
    } else if (v instanceof Throwable t) {
      string(s, t.toString());
    } else {
      string(s, String.valueOf(v));
    }
  }

  /** A map: keys as strings (a key that is not a String as its {@code toString()}). */
  static void map(ByteSink s, Map<?, ?> m) {
    mapHeader(s, m.size());
    for (Map.Entry<?, ?> e : m.entrySet()) {
      Object k = e.getKey();
      string(s, k instanceof String str ? str : String.valueOf(k));
      value(s, e.getValue());
    }
  }

  static void string(ByteSink s, String str) {
    int n = str.length();
    if (n > SHORT) {
      utf8(s, str);
      return;
    }
    int head = n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5;
    s.ensure(head + n);
    byte[] b = s.buf;
    int p = s.len + head;
    for (int i = 0; i < n; i++) {
      char c = str.charAt(i);
      if (c >= 0x80) {
        utf8(s, str);
        return;
      }
      b[p + i] = (byte) c;
    }
    strHeader(b, s.len, n);
    s.len += head + n;
  }

  /**
   * Strings longer than this go through {@code getBytes(UTF_8)}: for an ASCII string the JDK checks
   * and copies its bytes with vector instructions, faster than a char loop despite the temporary
   * array; shorter ones (keys) are copied char by char.
   */
  private static final int SHORT = 16;

  /** Any string: its UTF-8 bytes (not only ASCII). */
  private static void utf8(ByteSink s, String str) {
    byte[] bytes = str.getBytes(StandardCharsets.UTF_8);
    int n = bytes.length;
    int head = n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5;
    s.ensure(head + n);
    strHeader(s.buf, s.len, n);
    System.arraycopy(bytes, 0, s.buf, s.len + head, n);
    s.len += head + n;
  }

  private static void strHeader(byte[] b, int off, int n) {
    if (n < 32) {
      b[off] = (byte) (0xa0 | n);
    } else if (n < 256) {
      b[off] = (byte) 0xd9;
      b[off + 1] = (byte) n;
    } else if (n < 65536) {
      b[off] = (byte) 0xda;
      b[off + 1] = (byte) (n >>> 8);
      b[off + 2] = (byte) n;
    } else {
      b[off] = (byte) 0xdb;
      putInt(b, off + 1, n);
    }
  }

  /** The smallest msgpack int form, as msgpack-core's packLong chooses it. */
  static void integer(ByteSink s, long v) {
    s.ensure(9);
    byte[] b = s.buf;
    int p = s.len;
    if (v < -(1L << 5)) {
      if (v < -(1L << 15)) {
        if (v < -(1L << 31)) {
          b[p] = (byte) 0xd3;
          putLong(b, p + 1, v);
          s.len = p + 9;
        } else {
          b[p] = (byte) 0xd2;
          putInt(b, p + 1, (int) v);
          s.len = p + 5;
        }
      } else if (v < -(1 << 7)) {
        b[p] = (byte) 0xd1;
        b[p + 1] = (byte) (v >>> 8);
        b[p + 2] = (byte) v;
        s.len = p + 3;
      } else {
        b[p] = (byte) 0xd0;
        b[p + 1] = (byte) v;
        s.len = p + 2;
      }
    } else if (v < (1 << 7)) {
      b[p] = (byte) v;
      s.len = p + 1;
    } else if (v < (1L << 16)) {
      if (v < (1 << 8)) {
        b[p] = (byte) 0xcc;
        b[p + 1] = (byte) v;
        s.len = p + 2;
      } else {
        b[p] = (byte) 0xcd;
        b[p + 1] = (byte) (v >>> 8);
        b[p + 2] = (byte) v;
        s.len = p + 3;
      }
    } else if (v < (1L << 32)) {
      b[p] = (byte) 0xce;
      putInt(b, p + 1, (int) v);
      s.len = p + 5;
    } else {
      b[p] = (byte) 0xcf;
      putLong(b, p + 1, v);
      s.len = p + 9;
    }
  }

  private static void bigInteger(ByteSink s, BigInteger bi) {
    if (bi.bitLength() <= 63) {
      integer(s, bi.longValue());
    } else if (bi.bitLength() == 64 && bi.signum() == 1) {
      s.ensure(9);
      s.buf[s.len] = (byte) 0xcf;
      putLong(s.buf, s.len + 1, bi.longValue());
      s.len += 9;
    } else {
      throw new IllegalArgumentException("BigInteger does not fit in 64 bits: " + bi);
    }
  }

  static void float64(ByteSink s, double d) {
    s.ensure(9);
    s.buf[s.len] = (byte) 0xcb;
    putLong(s.buf, s.len + 1, Double.doubleToRawLongBits(d));
    s.len += 9;
  }

  private static void binary(ByteSink s, byte[] bytes) {
    int n = bytes.length;
    s.ensure(5 + n);
    byte[] b = s.buf;
    int p = s.len;
    if (n < 256) {
      b[p++] = (byte) 0xc4;
      b[p++] = (byte) n;
    } else if (n < 65536) {
      b[p++] = (byte) 0xc5;
      b[p++] = (byte) (n >>> 8);
      b[p++] = (byte) n;
    } else {
      b[p++] = (byte) 0xc6;
      putInt(b, p, n);
      p += 4;
    }
    System.arraycopy(bytes, 0, b, p, n);
    s.len = p + n;
  }

  static void arrayHeader(ByteSink s, int n) {
    header(s, n, 0x90, (byte) 0xdc, (byte) 0xdd);
  }

  static void mapHeader(ByteSink s, int n) {
    header(s, n, 0x80, (byte) 0xde, (byte) 0xdf);
  }

  private static void header(ByteSink s, int n, int fix, byte b16, byte b32) {
    s.ensure(5);
    byte[] b = s.buf;
    int p = s.len;
    if (n < 16) {
      b[p] = (byte) (fix | n);
      s.len = p + 1;
    } else if (n < 65536) {
      b[p] = b16;
      b[p + 1] = (byte) (n >>> 8);
      b[p + 2] = (byte) n;
      s.len = p + 3;
    } else {
      b[p] = b32;
      putInt(b, p + 1, n);
      s.len = p + 5;
    }
  }

  private static void putInt(byte[] b, int off, int v) {
    b[off] = (byte) (v >>> 24);
    b[off + 1] = (byte) (v >>> 16);
    b[off + 2] = (byte) (v >>> 8);
    b[off + 3] = (byte) v;
  }

  private static void putLong(byte[] b, int off, long v) {
    putInt(b, off, (int) (v >>> 32));
    putInt(b, off + 4, (int) v);
  }
}
