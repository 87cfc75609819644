package dev.nagare.logger;

/** An error reported to the application's error handler. The logger keeps running. */
public final class NagareError extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** What went wrong. */
  public enum Kind {
    /** A connection attempt to one server failed. */
    CONNECT,
    /** The handshake failed (wrong shared key, refused credentials, bad PONG). */
    HANDSHAKE,
    /** An established connection was lost or a write failed. */
    CONNECTION_LOST,
    /** A frame was not acknowledged within the ack timeout. */
    ACK_TIMEOUT,
    /** Events were dropped (buffer full, spill full, or not delivered at close). */
    DROPPED,
    /** The spill file could not be written or read. */
    SPILL,
    /** A record could not be encoded. */
    ENCODE
  }

  private final Kind kind;
  private final transient Endpoint endpoint;
  private final long nanoTime = System.nanoTime();

  public NagareError(Kind kind, Endpoint endpoint, String message, Throwable cause) {
    super(message, cause);
    this.kind = kind;
    this.endpoint = endpoint;
  }

  public Kind kind() {
    return kind;
  }

  /** When the error happened, in {@link System#nanoTime()} units. */
  public long nanoTime() {
    return nanoTime;
  }

  /** The server concerned, or null. */
  public Endpoint endpoint() {
    return endpoint;
  }
}
