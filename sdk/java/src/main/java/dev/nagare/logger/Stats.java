package dev.nagare.logger;

/**
 * Counters of a logger, all in events unless said otherwise.
 *
 * @param sent events delivered (written to a server, or acknowledged in ack mode)
 * @param buffered events accepted and not yet delivered (in memory or in the spill file)
 * @param spilled events written to the spill file and fsync'd (total since start)
 * @param dropped events dropped: buffer full in drop mode, spill file full, block timeout, or still
 *     undelivered when close() gave up without a spill file
 * @param reconnects connections established after the first one
 * @param resent frames sent again after a lost connection or an ack timeout
 * @param errors errors reported to the error handler
 * @param spillPending the part of {@code buffered} that is in the spill file, fsync'd: what a crash
 *     now would not lose (after close(), what the file keeps for the next logger)
 */
public record Stats(
    long sent,
    long buffered,
    long spilled,
    long dropped,
    long reconnects,
    long resent,
    long errors,
    long spillPending) {}
