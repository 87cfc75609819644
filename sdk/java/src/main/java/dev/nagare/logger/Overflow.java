package dev.nagare.logger;

/** What {@code emit()} does when the memory buffer is full. */
public enum Overflow {
  /** Write sealed chunks to the spill file and send them from there later, in order. */
  SPILL,
  /** Wait until there is room (up to the configured block timeout, then drop). */
  BLOCK,
  /** Drop the event and count it. */
  DROP;

  public static Overflow parse(String s) {
    return valueOf(s.trim().toUpperCase(java.util.Locale.ROOT));
  }
}
