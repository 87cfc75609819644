package dev.nagare.logger;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The buffer and the sender thread of one logger.
 *
 * <p>Events are encoded on the emitting thread and appended to the open chunk of their tag. A chunk
 * is sealed when it reaches the chunk limit or at the next flush tick; a sealed chunk goes to the
 * memory queue, or to the spill file while the memory is full or the spill file still holds unsent
 * chunks (so order is kept). One sender thread sends chunks in order: first those to resend, then
 * the memory queue, then the spill file. A chunk stays buffered until it has been written (or, in
 * ack mode, acknowledged).
 */
final class Pipeline implements Connection.Listener {
  /** Each emitting thread encodes into its own reused buffer, outside the lock. */
  private static final ThreadLocal<ByteSink> ENCODER =
      ThreadLocal.withInitial(() -> new ByteSink(1024));

  /** close() retries the servers this often until its deadline. */
  private static final long CLOSING_RETRY_NS = 100_000_000L;

  /**
   * While no server answers (with a spill file), open chunks are sealed into the spill file at
   * least this often, and any spill write is fsync'd within this long: a kill -9 during an outage
   * loses at most this much. The same interval in every SDK.
   */
  private static final long SPILL_SYNC_NS = 200_000_000L;

  private final Config cfg;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition work = lock.newCondition();
  private final Condition space = lock.newCondition();
  private final Condition idle = lock.newCondition();

  private final HashMap<String, Chunk> open = new HashMap<>();
  private final ArrayDeque<Chunk> queue = new ArrayDeque<>();
  private final ArrayDeque<Chunk> retry = new ArrayDeque<>();
  private final ArrayDeque<Chunk> inflight = new ArrayDeque<>();
  private final HashMap<String, Chunk> inflightById = new HashMap<>();
  private final SpillFile spill;

  private long openBytes;
  private long queuedBytes;
  private long pending;
  private boolean spilling;
  private boolean outage; // no server answered the last connect round: seal into the spill file
  private long diskEvents; // events in the spill file not yet delivered (fsync'd or not)
  private long unsyncedEvents; // appended to the spill file since the last fsync
  private long nextSync; // when they are fsync'd (valid while unsyncedEvents > 0)
  private boolean sealRequested;
  private boolean closing;
  private boolean closed;
  private boolean closeResult; // what close() returned: true only if nothing was left
  private volatile boolean stopNow;
  private int blockedWaiters;

  private long sent;
  private long spilled;
  private long dropped;
  private long reconnects;
  private long resent;
  private long errors;
  private long connections;
  private long lastDropReport;

  private Connection conn;
  private Connection pendingSwitch;
  private int failures;
  private long nextAttempt;
  private long nextPrimaryProbe;
  private long nextTick;

  private final long flushIntervalNs;
  private final long ackTimeoutNs;
  private final long primaryRetryNs;
  private final int initialChunkCapacity;
  private int chunkSizeHint = 4096;

  /**
   * Arrays of chunks that were delivered, for the next full-size chunks: a new 256 KiB array every
   * chunk limit's worth of events cost emit() more than the encoding (allocation outside the TLAB,
   * zeroing, and page faults on fresh heap). At most {@link #POOL_MAX} are kept.
   */
  private final ArrayDeque<byte[]> pool = new ArrayDeque<>();

  private static final int POOL_MAX = 8;
  private final int pooledLength;

  /** Encoded tags, so a new chunk of a known tag does not encode its tag again. */
  private final HashMap<String, byte[]> tagBytes = new HashMap<>();

  private final ThreadPoolExecutor reporter;
  private final Thread thread;

  Pipeline(Config cfg) throws IOException {
    this.cfg = cfg;
    this.flushIntervalNs = TimeUnit.MILLISECONDS.toNanos(cfg.flushIntervalMs);
    this.ackTimeoutNs = TimeUnit.MILLISECONDS.toNanos(cfg.ackTimeoutMs);
    this.primaryRetryNs = TimeUnit.MILLISECONDS.toNanos(cfg.primaryRetryMs);
    this.initialChunkCapacity = cfg.chunkLimit + 4096;
    // room for the frame header of any tag up to 255 bytes in front of a full-size chunk
    this.pooledLength = initialChunkCapacity + 512;
    this.spill = cfg.spillPath != null ? new SpillFile(cfg.spillPath, cfg.spillLimit) : null;
    if (spill != null) {
      pending += spill.recoveredEvents();
      diskEvents = spill.recoveredEvents();
    }
    if (cfg.errorHandler != null) {
      reporter =
          new ThreadPoolExecutor(
              1,
              1,
              0,
              TimeUnit.MILLISECONDS,
              new ArrayBlockingQueue<>(1024),
              r -> {
                Thread t = new Thread(r, "nagare-errors");
                t.setDaemon(true);
                return t;
              },
              new ThreadPoolExecutor.DiscardPolicy());
    } else {
      reporter = null;
    }
    long now = System.nanoTime();
    nextAttempt = now;
    nextTick = now + flushIntervalNs;
    thread = new Thread(this::run, "nagare-sender");
    thread.setDaemon(true);
    thread.start();
  }

  // ------------------------------------------------------------------ emit side

  boolean emit(String tag, long sec, long nsec, Map<String, ?> record) {
    ByteSink s = ENCODER.get();
    s.len = 0;
    try {
      Forward.writeEntry(s, sec, nsec, record);
    } catch (RuntimeException | StackOverflowError ex) {
      s.len = 0;
      lock.lock();
      try {
        report(new NagareError(NagareError.Kind.ENCODE, null, "cannot encode record: " + ex, ex));
      } finally {
        lock.unlock();
      }
      return false;
    }
    int n = s.len;
    boolean ok = append(tag, s.buf, n);
    if (s.buf.length > (1 << 20)) {
      s.buf = new byte[1024];
    }
    return ok;
  }

  private boolean append(String tag, byte[] entry, int n) {
    lock.lock();
    try {
      if (closed) {
        dropped++;
        return false;
      }
      if (openBytes + queuedBytes + n > cfg.bufferLimit) {
        switch (cfg.overflow) {
          case SPILL:
            spilling = true;
            break;
          case BLOCK:
            if (!awaitSpace(n)) {
              dropOne("buffer full: block timeout passed");
              return false;
            }
            break;
          default:
            dropOne("buffer full");
            return false;
        }
      }
      Chunk c = open.get(tag);
      if (c == null) {
        c = newChunk(tag);
        open.put(tag, c);
      }
      c.append(entry, n);
      openBytes += n;
      pending++;
      if (c.size() >= cfg.chunkLimit) {
        open.remove(tag);
        seal(c);
        work.signal();
      }
      return true;
    } finally {
      lock.unlock();
    }
  }

  private Chunk newChunk(String tag) {
    byte[] tb = tagBytes.get(tag);
    if (tb == null) {
      tb = tag.getBytes(java.nio.charset.StandardCharsets.UTF_8);
      if (tagBytes.size() < 1024) {
        tagBytes.put(tag, tb);
      }
    }
    if (chunkSizeHint >= initialChunkCapacity) {
      byte[] reuse = pool.pollFirst();
      return new Chunk(tag, tb, chunkSizeHint, reuse != null ? reuse : new byte[pooledLength]);
    }
    return new Chunk(tag, tb, chunkSizeHint, null);
  }

  /** Keeps a finished chunk's array for a later chunk (only full-size ones, at most POOL_MAX). */
  private void recycle(Chunk c) {
    if (c.buf.length == pooledLength && pool.size() < POOL_MAX) {
      pool.addLast(c.buf);
    }
    c.buf = null;
  }

  private void dropOne(String why) {
    dropped++;
    long now = System.nanoTime();
    if (lastDropReport == 0 || now - lastDropReport > 1_000_000_000L) {
      lastDropReport = now;
      report(
          new NagareError(
              NagareError.Kind.DROPPED, null, why + " (" + dropped + " dropped so far)", null));
    }
  }

  private boolean awaitSpace(int n) {
    long deadline =
        cfg.blockTimeoutMs > 0
            ? System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(cfg.blockTimeoutMs)
            : Long.MAX_VALUE;
    blockedWaiters++;
    try {
      while (!closed && openBytes + queuedBytes + n > cfg.bufferLimit) {
        if (openBytes > 0) {
          sealRequested = true;
          work.signal();
        }
        if (queuedBytes == 0 && openBytes == 0) {
          return true; // a single event larger than the whole buffer: let it through
        }
        long left = deadline == Long.MAX_VALUE ? 100_000_000L : deadline - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        try {
          space.awaitNanos(Math.min(left, 100_000_000L));
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
      return !closed;
    } finally {
      blockedWaiters--;
    }
  }

  /** Moves a chunk out of the open map: to the memory queue or to the spill file. */
  private void seal(Chunk c) {
    openBytes -= c.size();
    chunkSizeHint = Math.min(initialChunkCapacity, Math.max(4096, c.size() + (c.size() >> 3)));
    if (spill != null && (spilling || outage || spill.hasUnread())) {
      try {
        if (spill.append(c)) {
          recycle(c);
          diskEvents += c.count;
          if (unsyncedEvents == 0) {
            nextSync = System.nanoTime() + SPILL_SYNC_NS;
          }
          unsyncedEvents += c.count; // counted as spilled at the fsync
          return;
        }
        dropChunk(c, "spill file full (" + cfg.spillLimit + " bytes)", NagareError.Kind.DROPPED);
      } catch (IOException e) {
        dropChunk(c, "cannot write spill file " + spill.path + ": " + e, NagareError.Kind.SPILL);
      }
      return;
    }
    c.inMemory = true;
    queuedBytes += c.size();
    queue.addLast(c);
  }

  private void dropChunk(Chunk c, String why, NagareError.Kind kind) {
    dropped += c.count;
    pending -= c.count;
    report(new NagareError(kind, null, why + ": dropped " + c.count + " events", null));
    if (pending == 0) {
      idle.signalAll();
    }
  }

  private void sealAll() {
    if (open.isEmpty()) {
      return;
    }
    List<Chunk> all = new ArrayList<>(open.values());
    open.clear();
    for (Chunk c : all) {
      seal(c);
    }
  }

  private void complete(Chunk c) {
    pending -= c.count;
    sent += c.count;
    if (c.inMemory) {
      queuedBytes -= c.size();
      c.inMemory = false;
    }
    if (c.spillStart >= 0) {
      diskEvents -= c.count;
      try {
        spill.complete(c);
      } catch (IOException e) {
        report(new NagareError(NagareError.Kind.SPILL, null, "spill offset: " + e, e));
      }
    }
    recycle(c);
    failures = 0;
    if (blockedWaiters > 0) {
      space.signalAll();
    }
    if (pending == 0) {
      idle.signalAll();
    }
  }

  private void report(NagareError e) {
    errors++;
    if (reporter != null) {
      ErrorHandler h = cfg.errorHandler;
      reporter.execute(
          () -> {
            try {
              h.onError(e);
            } catch (RuntimeException ignored) {
              // the handler's own failure must not stop the logger
            }
          });
    }
  }

  // ------------------------------------------------------------------ control

  boolean flush(long timeoutMs) {
    lock.lock();
    try {
      sealRequested = true;
      work.signal();
      long left = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
      while (pending > 0 && left > 0 && !closed) {
        left = idle.awaitNanos(left);
      }
      return pending == 0;
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      return pending == 0;
    } finally {
      lock.unlock();
    }
  }

  boolean close(long timeoutMs) {
    lock.lock();
    try {
      if (closed) {
        return closeResult;
      }
      closing = true;
      sealRequested = true;
      // reconnect now, not when the current backoff delay ends
      nextAttempt = System.nanoTime();
      work.signal();
    } finally {
      lock.unlock();
    }
    try {
      thread.join(Math.max(1, timeoutMs));
      if (thread.isAlive()) {
        stopNow = true;
        lock.lock();
        try {
          work.signal();
          Connection c = conn;
          if (c != null) {
            c.close();
          }
        } finally {
          lock.unlock();
        }
        thread.join(5000);
      }
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
    }
    lock.lock();
    try {
      if (closed) {
        return closeResult;
      }
      closed = true;
      stopNow = true;
      // Undelivered events in delivery order: sent but unacknowledged, to resend, queued in
      // memory, (unread part of the spill file), and still open.
      List<Chunk> before = new ArrayList<>(inflight);
      before.addAll(retry);
      before.addAll(queue);
      List<Chunk> after = new ArrayList<>(open.values());
      inflight.clear();
      inflightById.clear();
      retry.clear();
      queue.clear();
      open.clear();
      openBytes = 0;
      queuedBytes = 0;
      long lost = 0;
      long saved = 0;
      long inMemory = 0;
      long fresh = 0; // not yet in the spill file
      for (Chunk c : before) {
        inMemory += c.count;
        fresh += c.spillStart < 0 ? c.count : 0;
      }
      for (Chunk c : after) {
        inMemory += c.count;
        fresh += c.count;
      }
      if (spill != null) {
        try {
          if (inMemory > 0) {
            lost = spill.rewrite(before, after);
          }
        } catch (IOException e) {
          lost = inMemory;
          report(new NagareError(NagareError.Kind.SPILL, null, "spill at close: " + e, e));
        }
        saved = pending - lost;
        spilled += Math.max(0, fresh - lost) + unsyncedEvents; // rewrite() or close() fsyncs
        unsyncedEvents = 0;
        diskEvents = saved;
      } else {
        lost = pending;
      }
      dropped += lost;
      pending = saved;
      if (lost > 0) {
        report(
            new NagareError(
                NagareError.Kind.DROPPED,
                null,
                "close: " + lost + " events not delivered within the timeout",
                null));
      }
      if (conn != null) {
        conn.close();
        conn = null;
      }
      if (pendingSwitch != null) {
        pendingSwitch.close();
        pendingSwitch = null;
      }
      if (spill != null) {
        try {
          spill.close();
        } catch (IOException e) {
          report(new NagareError(NagareError.Kind.SPILL, null, "closing spill file: " + e, e));
        }
      }
      idle.signalAll();
      space.signalAll();
      // pending: what the spill file keeps; lost: what was dropped
      closeResult = pending == 0 && lost == 0;
      return closeResult;
    } finally {
      lock.unlock();
      if (reporter != null) {
        reporter.shutdown();
        try {
          reporter.awaitTermination(1, TimeUnit.SECONDS);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
        }
      }
    }
  }

  Stats stats() {
    lock.lock();
    try {
      return new Stats(
          sent,
          pending,
          spilled,
          dropped,
          reconnects,
          resent,
          errors,
          Math.max(0, diskEvents - unsyncedEvents));
    } finally {
      lock.unlock();
    }
  }

  // ------------------------------------------------------------------ sender

  private void run() {
    lock.lock();
    try {
      while (!stopNow) {
        long now = System.nanoTime();
        if (conn != null && conn.isBroken()) {
          connectionLost(conn, now);
          continue;
        }
        if (pendingSwitch != null && pendingSwitch.isBroken()) {
          pendingSwitch = null;
        }
        if (conn != null
            && !inflight.isEmpty()
            && now - inflight.peekFirst().sentAt > ackTimeoutNs) {
          Connection c = conn;
          report(
              new NagareError(
                  NagareError.Kind.ACK_TIMEOUT,
                  c.endpoint,
                  "no ack within " + cfg.ackTimeoutMs + " ms from " + c.endpoint,
                  null));
          c.markBroken(new IOException("ack timeout"));
          c.close();
          connectionLost(c, now);
          continue;
        }
        if (sealRequested || (!open.isEmpty() && now - nextTick >= 0)) {
          sealAll();
          sealRequested = false;
          nextTick = now + (outage ? Math.min(flushIntervalNs, SPILL_SYNC_NS) : flushIntervalNs);
        }
        if (unsyncedEvents > 0 && now - nextSync >= 0) {
          syncSpill();
        }
        if (spilling && !spill.hasUnread() && openBytes + queuedBytes <= cfg.bufferLimit / 2) {
          spilling = false;
        }
        boolean hasWork =
            !retry.isEmpty() || !queue.isEmpty() || (spill != null && spill.hasUnread());
        if (!hasWork) {
          if (closing && open.isEmpty() && inflight.isEmpty()) {
            break;
          }
          long wait = open.isEmpty() ? flushIntervalNs : Math.max(1, nextTick - now);
          if (unsyncedEvents > 0) {
            wait = Math.min(wait, Math.max(1, nextSync - now));
          }
          if (!inflight.isEmpty()) {
            wait = Math.max(1, Math.min(wait, inflight.peekFirst().sentAt + ackTimeoutNs - now));
          }
          work.awaitNanos(wait);
          continue;
        }
        if (conn == null && pendingSwitch != null) {
          // the old connection died while we waited to leave it: use the primary right away
          conn = pendingSwitch;
          pendingSwitch = null;
          connections++;
          reconnects++;
          continue;
        }
        if (conn == null) {
          if (now - nextAttempt < 0) {
            long wait = nextAttempt - now;
            if (outage && !open.isEmpty()) {
              wait = Math.min(wait, Math.max(1, nextTick - now));
            }
            if (unsyncedEvents > 0) {
              wait = Math.min(wait, Math.max(1, nextSync - now));
            }
            work.awaitNanos(wait);
            continue;
          }
          connect();
          continue;
        }
        if (conn.index > 0 && pendingSwitch == null && now - nextPrimaryProbe >= 0) {
          probePrimary();
          continue;
        }
        if (pendingSwitch != null) {
          if (inflight.isEmpty()) {
            switchTo(pendingSwitch);
            pendingSwitch = null;
          } else {
            work.awaitNanos(Math.max(1, inflight.peekFirst().sentAt + ackTimeoutNs - now));
          }
          continue;
        }
        if (cfg.ack && inflight.size() >= cfg.maxInflight) {
          work.awaitNanos(Math.max(1, inflight.peekFirst().sentAt + ackTimeoutNs - now));
          continue;
        }
        Chunk c = pollNext();
        if (c != null) {
          send(c);
        }
      }
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
    } catch (RuntimeException | Error e) {
      report(new NagareError(NagareError.Kind.CONNECTION_LOST, null, "sender failed: " + e, e));
      throw e;
    } finally {
      lock.unlock();
    }
  }

  private Chunk pollNext() {
    Chunk c = retry.pollFirst();
    if (c != null) {
      return c;
    }
    c = queue.pollFirst();
    if (c != null) {
      return c;
    }
    if (spill != null) {
      try {
        return spill.readNext();
      } catch (IOException e) {
        report(new NagareError(NagareError.Kind.SPILL, null, "reading spill file: " + e, e));
      }
    }
    return null;
  }

  private static String newChunkId() {
    byte[] b = new byte[16];
    ThreadLocalRandom.current().nextBytes(b);
    return Base64.getEncoder().encodeToString(b);
  }

  private void send(Chunk c) {
    String id = null;
    if (cfg.ack) {
      id = c.chunkId != null ? c.chunkId : newChunkId();
    }
    if (cfg.compress) {
      // gzip outside the lock so emitters are not held up; the chunk belongs to the sender here
      lock.unlock();
      try {
        c.buildFrame(id, true);
      } finally {
        lock.lock();
      }
      if (conn == null || stopNow) {
        retry.addFirst(c);
        return;
      }
    } else {
      c.buildFrame(id, false);
    }
    Connection cn = conn;
    if (cfg.ack) {
      c.sentAt = System.nanoTime();
      inflight.addLast(c);
      inflightById.put(id, c);
    }
    IOException err = null;
    lock.unlock();
    try {
      cn.write(c.frameArray(), c.frameStart, c.frameEnd, cfg.writeTimeoutMs);
    } catch (IOException e) {
      err = e;
    } finally {
      lock.lock();
    }
    if (err != null) {
      if (!cfg.ack) {
        retry.addFirst(c);
      }
      cn.markBroken(err);
    } else if (!cfg.ack) {
      complete(c);
    }
  }

  private void connectionLost(Connection c, long now) {
    if (conn != c) {
      return;
    }
    conn = null;
    c.close();
    int n = inflight.size();
    for (Iterator<Chunk> it = inflight.descendingIterator(); it.hasNext(); ) {
      retry.addFirst(it.next());
    }
    inflight.clear();
    inflightById.clear();
    resent += n;
    failures++;
    nextAttempt = now + retryDelayNs(failures);
    Throwable why = c.cause();
    report(
        new NagareError(
            NagareError.Kind.CONNECTION_LOST,
            c.endpoint,
            "connection to "
                + c.endpoint
                + " lost"
                + (why != null ? ": " + why.getMessage() : "")
                + (n > 0 ? "; " + n + " unacknowledged frames will be resent" : ""),
            why));
  }

  /** The backoff delay, but while close() waits a short one: it keeps trying until its deadline. */
  private long retryDelayNs(int f) {
    long d = backoffNs(f);
    return closing ? Math.min(d, CLOSING_RETRY_NS) : d;
  }

  long backoffNs(int f) {
    double base = cfg.retryInitialMs * Math.pow(cfg.retryMultiplier, Math.max(0, f - 1));
    base = Math.min(base, cfg.retryMaxMs);
    double j = cfg.retryJitter * (2 * ThreadLocalRandom.current().nextDouble() - 1);
    return (long) (base * (1 + j) * 1_000_000L);
  }

  private void connect() {
    List<Endpoint> servers = cfg.servers;
    Connection c = null;
    List<NagareError> errs = new ArrayList<>();
    lock.unlock();
    try {
      for (int i = 0; i < servers.size() && !stopNow; i++) {
        Endpoint ep = servers.get(i);
        try {
          c = Connection.open(cfg, ep, i, this);
          break;
        } catch (Handshake.HandshakeException e) {
          errs.add(
              new NagareError(
                  NagareError.Kind.HANDSHAKE,
                  ep,
                  "handshake with " + ep + ": " + e.getMessage(),
                  e));
        } catch (IOException | RuntimeException e) {
          errs.add(new NagareError(NagareError.Kind.CONNECT, ep, "connect to " + ep + ": " + e, e));
        }
      }
    } finally {
      lock.lock();
    }
    errs.forEach(this::report);
    long now = System.nanoTime();
    if (c == null) {
      failures++;
      nextAttempt = now + retryDelayNs(failures);
      startOutage();
      return;
    }
    if (stopNow) {
      c.close();
      return;
    }
    outage = false;
    conn = c;
    connections++;
    if (connections > 1) {
      reconnects++;
    }
    nextPrimaryProbe = now + primaryRetryNs;
  }

  /** fsync the spill file; only then are its new events counted as spilled. */
  private void syncSpill() {
    try {
      spill.sync();
      spilled += unsyncedEvents;
      unsyncedEvents = 0;
    } catch (IOException e) {
      nextSync = System.nanoTime() + SPILL_SYNC_NS;
      report(new NagareError(NagareError.Kind.SPILL, null, "spill file fsync: " + e, e));
    }
  }

  /**
   * No server answered a whole connect round: with a spill file and overflow SPILL, what waits in
   * memory (to resend, queued, open) goes in front of what the file holds, fsync'd, and chunks are
   * sealed into the file at least every SPILL_SYNC_NS until a server answers, so a kill -9 of the
   * application during the outage loses at most that much.
   */
  private void startOutage() {
    if (outage || spill == null || cfg.overflow != Overflow.SPILL || closed) {
      return;
    }
    List<Chunk> before = new ArrayList<>(retry); // no connection: nothing is in flight
    before.addAll(queue);
    List<Chunk> after = new ArrayList<>(open.values());
    long fresh = 0; // not yet in the spill file
    for (Chunk c : before) {
      fresh += c.spillStart < 0 ? c.count : 0;
    }
    for (Chunk c : after) {
      fresh += c.count;
    }
    try {
      long lost = spill.rewrite(before, after);
      dropped += lost;
      pending -= lost;
      diskEvents = pending; // nothing is in memory any more
      spilled += Math.max(0, fresh - lost) + unsyncedEvents;
      unsyncedEvents = 0;
      if (lost > 0) {
        report(
            new NagareError(
                NagareError.Kind.DROPPED,
                null,
                "spill file full (" + cfg.spillLimit + " bytes): dropped " + lost + " events",
                null));
      }
    } catch (IOException e) {
      report(new NagareError(NagareError.Kind.SPILL, null, "spill at outage: " + e, e));
      return; // memory keeps them
    }
    retry.clear();
    queue.clear();
    open.clear();
    openBytes = 0;
    queuedBytes = 0;
    outage = true;
    nextTick = System.nanoTime() + Math.min(flushIntervalNs, SPILL_SYNC_NS);
    if (blockedWaiters > 0) {
      space.signalAll();
    }
  }

  private void probePrimary() {
    long now = System.nanoTime();
    nextPrimaryProbe = now + primaryRetryNs;
    Connection c = null;
    lock.unlock();
    try {
      c = Connection.open(cfg, cfg.servers.get(0), 0, this);
    } catch (IOException | RuntimeException e) {
      // still down: stay on the current server
    } finally {
      lock.lock();
    }
    if (c == null) {
      return;
    }
    if (stopNow) {
      c.close();
      return;
    }
    if (conn == null) {
      conn = c;
      connections++;
      reconnects++;
      return;
    }
    if (inflight.isEmpty()) {
      switchTo(c);
    } else {
      pendingSwitch = c;
    }
  }

  private void switchTo(Connection c) {
    Connection old = conn;
    conn = c;
    connections++;
    reconnects++;
    if (old != null) {
      old.close();
    }
  }

  @Override
  public void onAck(Connection c, String id) {
    lock.lock();
    try {
      Chunk chunk = inflightById.remove(id);
      if (chunk != null) {
        inflight.remove(chunk);
        complete(chunk);
        work.signal();
      }
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void onBroken(Connection c, Throwable cause) {
    lock.lock();
    try {
      work.signal();
    } finally {
      lock.unlock();
    }
  }
}
