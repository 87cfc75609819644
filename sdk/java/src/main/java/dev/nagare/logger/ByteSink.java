package dev.nagare.logger;

import java.util.Arrays;
import org.msgpack.core.buffer.MessageBuffer;
import org.msgpack.core.buffer.MessageBufferOutput;

/** A growable byte array that a {@link org.msgpack.core.MessagePacker} writes into directly. */
final class ByteSink implements MessageBufferOutput {
  byte[] buf;
  int len;

  ByteSink(int initial) {
    buf = new byte[Math.max(16, initial)];
  }

  void ensure(int extra) {
    long need = (long) len + extra;
    if (need > buf.length) {
      if (need > Integer.MAX_VALUE - 64) {
        throw new IllegalStateException("buffer too large");
      }
      int cap = (int) Math.min(Integer.MAX_VALUE - 64, Math.max(need, (long) buf.length * 2));
      buf = Arrays.copyOf(buf, cap);
    }
  }

  void put(byte b) {
    ensure(1);
    buf[len++] = b;
  }

  @Override
  public MessageBuffer next(int minimumSize) {
    ensure(Math.max(minimumSize, 256));
    return MessageBuffer.wrap(buf, len, buf.length - len);
  }

  @Override
  public void writeBuffer(int length) {
    len += length;
  }

  @Override
  public void write(byte[] src, int off, int n) {
    ensure(n);
    System.arraycopy(src, off, buf, len, n);
    len += n;
  }

  @Override
  public void add(byte[] src, int off, int n) {
    write(src, off, n);
  }

  @Override
  public void flush() {}

  @Override
  public void close() {}

  byte[] toByteArray() {
    return Arrays.copyOf(buf, len);
  }
}
