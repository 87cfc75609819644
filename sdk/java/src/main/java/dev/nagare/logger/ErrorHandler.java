package dev.nagare.logger;

/**
 * Receives the errors of a logger. It is called from the logger's own threads (and from the
 * emitting thread for drops, at most once a second); it must return quickly and must not call
 * {@code emit()} on the same logger.
 */
@FunctionalInterface
public interface ErrorHandler {
  void onError(NagareError error);
}
