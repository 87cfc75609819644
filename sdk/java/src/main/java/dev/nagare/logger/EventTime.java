package dev.nagare.logger;

import java.time.Instant;

/**
 * A forward-protocol EventTime: seconds and nanoseconds since the Unix epoch. It is written as
 * msgpack ext type 0 in the fixext8 form: {@code d7 00}, seconds as u32 big-endian, nanoseconds as
 * u32 big-endian.
 */
public record EventTime(long seconds, long nanos) {

  public EventTime {
    if (seconds < 0 || seconds > 0xFFFF_FFFFL) {
      throw new IllegalArgumentException("seconds out of u32 range: " + seconds);
    }
    if (nanos < 0 || nanos > 999_999_999L) {
      throw new IllegalArgumentException("nanoseconds out of range: " + nanos);
    }
  }

  /** The current time, as precise as the platform clock allows. */
  public static EventTime now() {
    return of(Instant.now());
  }

  public static EventTime of(Instant instant) {
    return new EventTime(instant.getEpochSecond(), instant.getNano());
  }

  public static EventTime ofEpochMillis(long millis) {
    return new EventTime(Math.floorDiv(millis, 1000L), Math.floorMod(millis, 1000L) * 1_000_000L);
  }

  public Instant toInstant() {
    return Instant.ofEpochSecond(seconds, nanos);
  }

  /** The 10 bytes of the msgpack encoding. */
  public byte[] toBytes() {
    byte[] b = new byte[10];
    write(b, 0, seconds, nanos);
    return b;
  }

  static void write(byte[] b, int off, long sec, long nsec) {
    b[off] = (byte) 0xd7;
    b[off + 1] = 0;
    b[off + 2] = (byte) (sec >>> 24);
    b[off + 3] = (byte) (sec >>> 16);
    b[off + 4] = (byte) (sec >>> 8);
    b[off + 5] = (byte) sec;
    b[off + 6] = (byte) (nsec >>> 24);
    b[off + 7] = (byte) (nsec >>> 16);
    b[off + 8] = (byte) (nsec >>> 8);
    b[off + 9] = (byte) nsec;
  }
}
