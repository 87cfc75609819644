package nagare

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseContext(ctxTimeout(t, time.Second)) })
	return c
}

func emitN(t *testing.T, c *Client, tag string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := c.Emit(tag, record(i)); err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
	}
}

func TestEmitFlushInOrder(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}, ChunkSize: 4096})
	emitN(t, c, "app.test", 0, 5000)
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	es := s.waitEvents(5000, 5*time.Second)
	checkSeqs(t, es, 5000)
	for _, tag := range s.tags {
		if tag != "app.test" {
			t.Fatalf("tag %q", tag)
		}
	}
	st := c.Stats()
	if st.Sent != 5000 || st.Buffered != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	if s.frames < 2 {
		t.Fatalf("expected several frames (chunk size), got %d", s.frames)
	}
}

func TestEventTimeNanoseconds(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}})
	tm := time.Unix(1763770800, 123456789)
	if err := c.EmitWithTime("app.time", tm, map[string]any{"seq": 0}); err != nil {
		t.Fatal(err)
	}
	if err := c.EmitRaw("app.time", tm, []byte{0x81, 0xa3, 's', 'e', 'q', 0x01}); err != nil {
		t.Fatal(err)
	}
	if err := c.Emit("app.time", "not a map"); !errors.Is(err, ErrNotMap) {
		t.Fatalf("non-map record: %v", err)
	}
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	es := s.waitEvents(2, 5*time.Second)
	for _, e := range es {
		if !e.Time.Equal(tm) {
			t.Fatalf("time %v, want %v", e.Time, tm)
		}
	}
	checkSeqs(t, es, 2)
}

func TestCloseFlushes(t *testing.T) {
	s := startTestServer(t)
	c, err := New(Config{Servers: []Server{s.server()}, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	emitN(t, c, "app.close", 0, 1000)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(1000, 5*time.Second), 1000)
	if err := c.Emit("app.close", record(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("emit after close: %v", err)
	}
}

func TestFlushIntervalSendsWithoutFlush(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}, FlushInterval: 20 * time.Millisecond})
	emitN(t, c, "app.tick", 0, 3)
	checkSeqs(t, s.waitEvents(3, 5*time.Second), 3)
}

func TestServerRestartNothingLost(t *testing.T) {
	for _, ack := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-ack", true: "ack"}[ack], func(t *testing.T) {
			s := startTestServer(t)
			c := newClient(t, Config{
				Servers: []Server{s.server()}, RequireAck: ack, AckTimeout: 500 * time.Millisecond,
				BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
				FlushInterval: 10 * time.Millisecond,
			})
			emitN(t, c, "app.restart", 0, 500)
			if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			s.waitEvents(500, 5*time.Second) // see TestPeerCloseDetectedBeforeWrite
			s.stop()
			emitN(t, c, "app.restart", 500, 1000)
			time.Sleep(100 * time.Millisecond) // the client tries and fails meanwhile
			if st := c.Stats(); st.Buffered == 0 {
				t.Fatalf("events should wait for the server: %+v", st)
			}
			s.start()
			if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			checkSeqs(t, s.waitEvents(1000, 5*time.Second), 1000)
			if st := c.Stats(); st.Reconnects < 1 || st.Sent != 1000 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestPeerCloseDetectedBeforeWrite(t *testing.T) {
	// The server closes the idle connection; the next batch must go
	// through a new connection rather than into the dead one.
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}, BackoffBase: 10 * time.Millisecond})
	emitN(t, c, "app.fin", 0, 10)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Without acks, a frame is "sent" once written: wait until the server
	// read it, as a server that is stopped before it reads loses it.
	s.waitEvents(10, 5*time.Second)
	s.stop()
	s.start()
	time.Sleep(50 * time.Millisecond) // FIN arrives at the client
	emitN(t, c, "app.fin", 10, 20)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(20, 5*time.Second), 20)
}

func TestBackoffIntervalsGrow(t *testing.T) {
	var log errLog
	c := newClient(t, Config{
		Servers:     []Server{{Address: freeAddr(t)}},
		BackoffBase: 20 * time.Millisecond, BackoffMax: 320 * time.Millisecond,
		FlushInterval: time.Millisecond, ErrorHandler: log.handle,
	})
	emitN(t, c, "app.backoff", 0, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, times := log.snapshot()
		if len(times) >= 8 { // 7 gaps
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d connect attempts", len(times))
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, times := log.snapshot()
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	t.Logf("backoff gaps: %v", gaps)
	// Expected delay before attempt i+1: min(20ms·2^i, 320ms) times a
	// jitter factor in [0.75, 1.25). Timers never fire early, so the lower
	// bound is exact; the upper bound leaves room for a loaded machine.
	for i, g := range gaps[:6] {
		d := min(20*time.Millisecond<<i, 320*time.Millisecond)
		if g < d*3/4 || g > d*5/4+150*time.Millisecond {
			t.Fatalf("gap %d is %v, want %v ±25%%: %v", i, g, d, gaps)
		}
	}
	for i := 1; i < 4; i++ {
		if gaps[i+1] <= gaps[i-1] {
			t.Fatalf("backoff does not grow: %v", gaps)
		}
	}
}

func TestSpillToDiskAndDrainInOrder(t *testing.T) {
	dir := t.TempDir()
	spill := filepath.Join(dir, "spill.dat")
	s := newTestServer(t, "tcp", freeAddr(t))
	t.Cleanup(s.stop)
	c := newClient(t, Config{
		Servers: []Server{s.server()}, SpillPath: spill,
		BufferLimit: 16 << 10, ChunkSize: 2 << 10,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
	})
	const n = 3000 // about 100 KB, six times the memory buffer
	emitN(t, c, "app.spill", 0, n)
	// Spilled counts what is fsync'd, within spillSyncInterval
	waitStats(t, c, "spilling", func(st Stats) bool { return st.Spilled > 0 })
	if st := c.Stats(); st.Dropped != 0 || st.Buffered != n {
		t.Fatalf("expected spilling: %+v", st)
	}
	if fi, err := os.Stat(spill); err != nil || fi.Size() == 0 {
		t.Fatalf("spill file: %v %v", fi, err)
	}
	s.start()
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(n, 5*time.Second), n)
	if fi, err := os.Stat(spill); err != nil || fi.Size() != 0 {
		t.Fatalf("spill file should be empty after draining: %v %v", fi, err)
	}
}

func TestSpillSurvivesRestartOfClient(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "spill.dat")
	addr := freeAddr(t)
	c1, err := New(Config{
		Servers: []Server{{Address: addr}}, SpillPath: spill,
		BufferLimit: 8 << 10, ChunkSize: 1 << 10, BackoffBase: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	emitN(t, c1, "app.persist", 0, 1000)
	if err := c1.CloseContext(ctxTimeout(t, 200*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("close without server: %v", err)
	}
	if st := c1.Stats(); st.Dropped != 0 {
		t.Fatalf("nothing may be lost with a spill file: %+v", st)
	}
	s := newTestServer(t, "tcp", addr)
	s.start()
	t.Cleanup(s.stop)
	c2 := newClient(t, Config{Servers: []Server{{Address: addr}}, SpillPath: spill})
	emitN(t, c2, "app.persist", 1000, 1100)
	if err := c2.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(1100, 5*time.Second), 1100)
}

// waitStats waits (up to 5 s) until cond holds for the client's counters.
func waitStats(t *testing.T, c *Client, what string, cond func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond(c.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s: %+v", what, c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drainCrashedCopy copies the spill file as a kill -9 would leave it (taken
// while the client writing it still runs), opens a client on the copy against
// a test server, flushes it and checks that seqs 0..n-1 arrived; it returns
// that client.
func drainCrashedCopy(t *testing.T, spill string, n int) *Client {
	t.Helper()
	data, err := os.ReadFile(spill)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(filepath.Dir(spill), "crashed.dat")
	if err := os.WriteFile(crashed, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}, SpillPath: crashed})
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(n, 5*time.Second), n)
	return c
}

// With a spill file, events go to disk while no server answers, not only
// when memory is full: the file as a kill -9 would leave it (copied while the
// client still runs) holds every event, and a client opened on it sends them.
func TestSpillDuringOutageWithRoomInMemory(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "spill.dat")
	addr := freeAddr(t)
	c := newClient(t, Config{
		Servers: []Server{{Address: addr}}, SpillPath: spill,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
	})
	emitN(t, c, "app.outage", 0, 500)
	waitStats(t, c, "first 500 on disk", func(st Stats) bool { return st.SpillPending == 500 })
	emitN(t, c, "app.outage", 500, 1000) // while the client knows of the outage
	waitStats(t, c, "all on disk", func(st Stats) bool { return st.SpillPending == 1000 })
	if st := c.Stats(); st.Buffered != 1000 || st.Spilled != 1000 || st.Dropped != 0 {
		t.Fatalf("counters during the outage: %+v", st)
	}
	c2 := drainCrashedCopy(t, spill, 1000)
	if st := c2.Stats(); st.Sent != 1000 || st.SpillPending != 0 {
		t.Fatalf("counters after the drain: %+v", st)
	}
}

// The batch the sender holds while its first connect hangs stays in memory
// while memory fills up and later batches go to the spill file for room; when
// the connect fails, the held batch goes to the file too, in front of them:
// the file as a kill -9 during the outage leaves it (copied while the client
// still runs) is in sending order.
func TestSpillKeepsOrderWhenTheHeldBatchSpillsLast(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "spill.dat")
	// A server that accepts and never sends HELO: with a shared key the
	// client's connect waits in the handshake until DialTimeout, then fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- cn
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case cn := <-accepted:
				cn.Close()
			default:
				return
			}
		}
	})
	c := newClient(t, Config{
		Servers: []Server{{Address: ln.Addr().String()}}, SharedKey: "k", SpillPath: spill,
		BufferLimit: 8 << 10, ChunkSize: 1 << 10, FlushInterval: 10 * time.Millisecond,
		DialTimeout: time.Second, BackoffBase: time.Minute, BackoffMax: time.Minute,
	})
	emitN(t, c, "app.held", 0, 10) // one small batch: the sender takes it and connects
	select {
	case cn := <-accepted:
		accepted <- cn // closed at cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not connect within 5 s")
	}
	emitN(t, c, "app.held", 10, 1000) // fills memory: later batches are spilled for room
	waitStats(t, c, "all on disk after the failed connect", func(st Stats) bool { return st.SpillPending == 1000 })
	drainCrashedCopy(t, spill, 1000)
}

// In ack mode the sender has several frames in flight: draining a spill
// file, it writes the next frames before the first one's ack is back.
func TestAckModeSeveralFramesInFlight(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "spill.dat")
	addr := freeAddr(t)
	c := newClient(t, Config{
		Servers: []Server{{Address: addr}}, SpillPath: spill, RequireAck: true, ChunkSize: 1 << 10,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
	})
	emitN(t, c, "app.window", 0, 800) // about 30 frames of 1 KiB, on disk
	waitStats(t, c, "all on disk", func(st Stats) bool { return st.SpillPending == 800 })
	s := newTestServer(t, "tcp", addr)
	s.ackLater = 20 * time.Millisecond
	s.start()
	t.Cleanup(s.stop)
	if err := c.Flush(ctxTimeout(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(800, 5*time.Second), 800)
	s.mu.Lock()
	most := s.maxUnacked
	s.mu.Unlock()
	if most < 2 {
		t.Fatalf("at most %d frame in flight; want several", most)
	}
}

func TestOverflowDrop(t *testing.T) {
	addr := freeAddr(t)
	c := newClient(t, Config{
		Servers: []Server{{Address: addr}}, Overflow: OverflowDrop,
		BufferLimit: 8 << 10, ChunkSize: 1 << 10, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
	})
	dropped := 0
	for i := 0; i < 1000; i++ {
		if err := c.Emit("app.drop", record(i)); errors.Is(err, ErrBufferFull) {
			dropped++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if dropped == 0 || st.Dropped != uint64(dropped) || st.Buffered != uint64(1000-dropped) {
		t.Fatalf("dropped %d, stats %+v", dropped, st)
	}
	s := newTestServer(t, "tcp", addr)
	s.start()
	t.Cleanup(s.stop)
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := s.waitEvents(1000-dropped, 5*time.Second)
	checkSeqs(t, got, 1000-dropped) // the first ones are kept, later ones dropped
}

// A burst of drops is one ErrorHandler call with the count, not one per event.
func TestDropsReportedOncePerBurst(t *testing.T) {
	var log errLog
	c, err := New(Config{
		Servers: []Server{{Address: freeAddr(t)}}, Overflow: OverflowDrop, BufferLimit: 8 << 10,
		ChunkSize: 1 << 10, BackoffBase: time.Second, ErrorHandler: log.handle,
	})
	if err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for i := 0; i < 2000; i++ {
		if errors.Is(c.Emit("app.burst", record(i)), ErrBufferFull) {
			dropped++
		}
	}
	_ = c.CloseContext(ctxTimeout(t, 100*time.Millisecond)) // tells the drops not yet reported
	errs, _ := log.snapshot()
	reports, told := 0, 0
	for _, e := range errs {
		var n int
		if errors.Is(e, ErrBufferFull) {
			if _, err := fmt.Sscanf(e.Error()[strings.LastIndex(e.Error(), ": ")+2:], "%d events dropped", &n); err != nil {
				t.Fatalf("no count in %q", e)
			}
			reports++
			told += n
		}
	}
	// one report, or two if the 1 s timer fired during the emit loop
	if dropped == 0 || told != dropped || reports == 0 || reports > 2 {
		t.Fatalf("%d dropped, %d reports telling %d", dropped, reports, told)
	}
}

func TestOverflowBlock(t *testing.T) {
	addr := freeAddr(t)
	c := newClient(t, Config{
		Servers: []Server{{Address: addr}}, Overflow: OverflowBlock,
		BufferLimit: 8 << 10, ChunkSize: 1 << 10, BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
	})
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 1000; i++ {
			if err := c.Emit("app.block", record(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		t.Fatalf("emit should block while the buffer is full (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	s := newTestServer(t, "tcp", addr)
	s.start()
	t.Cleanup(s.stop)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("emit still blocked after the server came back")
	}
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(1000, 5*time.Second), 1000)
	if st := c.Stats(); st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFailoverAndReturnToPrimary(t *testing.T) {
	primary := newTestServer(t, "tcp", freeAddr(t))
	t.Cleanup(primary.stop)
	secondary := startTestServer(t)
	c := newClient(t, Config{
		Servers:     []Server{primary.server(), secondary.server()},
		BackoffBase: 10 * time.Millisecond, PrimaryRetry: 100 * time.Millisecond,
		FlushInterval: 5 * time.Millisecond,
	})
	emitN(t, c, "app.failover", 0, 100)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, secondary.waitEvents(100, 5*time.Second), 100)

	primary.start()
	// Keep sending: within PrimaryRetry the client moves back.
	deadline := time.Now().Add(5 * time.Second)
	i := 100
	for primary.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("client did not return to the primary")
		}
		emitN(t, c, "app.failover", i, i+1)
		i++
		if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Everything after the switch goes to the primary.
	before := secondary.count()
	emitN(t, c, "app.failover", i, i+100)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if secondary.count() != before {
		t.Fatalf("events went to the secondary after returning to the primary")
	}
	all := append(secondary.waitEvents(before, time.Second), primary.waitEvents(i+100-before, 5*time.Second)...)
	checkSeqs(t, all, i+100)
}

func TestAckModeResendsUnacked(t *testing.T) {
	s := startTestServer(t)
	s.mu.Lock()
	s.skipAcks = 2 // the server "loses" the first two frames
	s.mu.Unlock()
	var log errLog
	c := newClient(t, Config{
		Servers: []Server{s.server()}, RequireAck: true, AckTimeout: 200 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, ErrorHandler: log.handle, ChunkSize: 1024,
	})
	emitN(t, c, "app.ack", 0, 200)
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// the frames sent after the unacked ones in the same window were acked
	// and are not sent again, so the resent ones arrive after them
	checkSeqsOnce(t, s.waitEvents(200, 5*time.Second), 200)
	if !log.has(ErrAckTimeout) {
		t.Fatal("no ack timeout reported")
	}
	// both unacked frames are in one window: one ack timeout, one reconnect
	if st := c.Stats(); st.Errors < 1 || st.Reconnects < 1 || st.Sent != 200 {
		t.Fatalf("stats %+v", st)
	}
	s.mu.Lock()
	ids := append([]string(nil), s.chunkIDs...)
	s.mu.Unlock()
	// the frames of the first two ids got no ack: each was sent again with
	// its id; every other frame once, with an id of its own
	unacked := map[string]bool{ids[0]: true, ids[1]: true}
	times := map[string]int{}
	for _, id := range ids {
		times[id]++
	}
	for id, n := range times {
		if unacked[id] && n < 2 {
			t.Fatalf("unacked chunk %s was not resent with the same id: %v", id, ids)
		}
		if !unacked[id] && n != 1 {
			t.Fatalf("chunk id %s sent %d times: %v", id, n, ids)
		}
	}
}

func TestAckDelayedWithinTimeout(t *testing.T) {
	s := startTestServer(t)
	s.mu.Lock()
	s.ackDelay = 50 * time.Millisecond
	s.mu.Unlock()
	c := newClient(t, Config{Servers: []Server{s.server()}, RequireAck: true, AckTimeout: 2 * time.Second})
	emitN(t, c, "app.ack", 0, 100)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(100, time.Second), 100)
}

func TestUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "ngo") // short path: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := newTestServer(t, "unix", filepath.Join(dir, "f.sock"))
	s.start()
	t.Cleanup(s.stop)
	c := newClient(t, Config{Servers: []Server{{Network: "unix", Address: filepath.Join(dir, "f.sock")}}, RequireAck: true})
	emitN(t, c, "app.unix", 0, 300)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(300, 5*time.Second), 300)
}

func TestSharedKeyHandshake(t *testing.T) {
	s := newTestServer(t, "tcp", "127.0.0.1:0")
	s.sharedKey = "s3cret"
	s.start()
	t.Cleanup(s.stop)
	c := newClient(t, Config{Servers: []Server{s.server()}, SharedKey: "s3cret", RequireAck: true})
	emitN(t, c, "app.auth", 0, 10)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(10, time.Second), 10)

	var log errLog
	bad := newClient(t, Config{Servers: []Server{s.server()}, SharedKey: "wrong", ErrorHandler: log.handle, BackoffBase: 50 * time.Millisecond})
	emitN(t, bad, "app.auth", 0, 1)
	if err := bad.Flush(ctxTimeout(t, 300*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("flush with a wrong key: %v", err)
	}
	if !log.has(ErrAuth) {
		t.Fatal("handshake failure not reported")
	}
	if s.count() != 10 {
		t.Fatal("events accepted with a wrong key")
	}
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	s := newTestServer(t, "tcp", "127.0.0.1:0")
	s.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.sharedKey = "k"
	s.start()
	t.Cleanup(s.stop)
	c := newClient(t, Config{
		Servers: []Server{s.server()}, SharedKey: "k",
		TLS: &tls.Config{RootCAs: pool, ServerName: "localhost"},
	})
	emitN(t, c, "app.tls", 0, 100)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(100, 5*time.Second), 100)
}

func TestCompressed(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}, Compress: true, RequireAck: true})
	emitN(t, c, "app.gzip", 0, 1000)
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(1000, 5*time.Second), 1000)
}

func TestSeveralTagsOneFramePerTag(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}, FlushInterval: time.Hour})
	for i := 0; i < 30; i++ {
		tag := []string{"a", "b", "c"}[i%3]
		if err := c.Emit(tag, record(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	s.waitEvents(30, time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frames != 3 {
		t.Fatalf("%d frames, want one per tag", s.frames)
	}
	for i, e := range s.events {
		if got := []string{"a", "b", "c"}[int(e.Record["seq"].(int8))%3]; got != s.tags[i] {
			t.Fatalf("event %v under tag %s", e.Record, s.tags[i])
		}
	}
}

func TestSlogHandler(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{Servers: []Server{s.server()}})
	log := slog.New(NewSlogHandler(c, "app.log", &SlogOptions{Level: slog.LevelDebug}))
	log.With("svc", "api").WithGroup("req").Info("hello", "seq", 0, "path", "/x", slog.Group("user", "id", 7))
	log.Debug("dbg", "seq", 1, "err", errors.New("boom"), "d", time.Second)
	slog.New(NewSlogHandler(c, "app.log", nil)).Debug("not recorded")
	if err := c.Flush(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	es := s.waitEvents(2, 5*time.Second)
	time.Sleep(50 * time.Millisecond)
	if s.count() != 2 {
		t.Fatalf("%d events, want 2 (debug filtered)", s.count())
	}
	r0 := es[0].Record
	if r0["msg"] != "hello" || r0["level"] != "INFO" || r0["svc"] != "api" {
		t.Fatalf("record %v", r0)
	}
	req, _ := r0["req"].(map[string]any)
	user, _ := req["user"].(map[string]any)
	if req["path"] != "/x" || user == nil || user["id"] != int8(7) {
		t.Fatalf("groups: %v", r0)
	}
	r1 := es[1].Record
	if r1["err"] != "boom" || r1["level"] != "DEBUG" || r1["d"] != "1s" {
		t.Fatalf("record %v", r1)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestAckModeServerRestartsMidStream(t *testing.T) {
	s := startTestServer(t)
	c := newClient(t, Config{
		Servers: []Server{s.server()}, RequireAck: true, AckTimeout: 300 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		ChunkSize: 2048, FlushInterval: 5 * time.Millisecond,
	})
	const n = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			if err := c.Emit("app.mid", record(i)); err != nil {
				t.Errorf("emit: %v", err)
				return
			}
			if i%100 == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	s.stop()
	time.Sleep(100 * time.Millisecond)
	s.start()
	<-done
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// At-least-once: every event arrives; a frame whose ack was lost may
	// arrive twice.
	checkAllSeqs(t, s.waitEvents(n, 5*time.Second), n)
}

func TestSpillLimitDropsAndCounts(t *testing.T) {
	addr := freeAddr(t)
	c := newClient(t, Config{
		Servers: []Server{{Address: addr}}, SpillPath: filepath.Join(t.TempDir(), "s"),
		SpillLimit: 16 << 10, BufferLimit: 8 << 10, ChunkSize: 1 << 10,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
	})
	full := 0
	for i := 0; i < 2000; i++ {
		if err := c.Emit("app.limit", record(i)); errors.Is(err, ErrBufferFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if full == 0 || st.Dropped != uint64(full) || st.Buffered != uint64(2000-full) {
		t.Fatalf("full %d, stats %+v", full, st)
	}
	waitStats(t, c, "spilled, fsync'd", func(st Stats) bool { return st.Spilled > 0 })
	s := newTestServer(t, "tcp", addr)
	s.start()
	t.Cleanup(s.stop)
	if err := c.Flush(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, s.waitEvents(2000-full, 5*time.Second), 2000-full)
}

// Close reconnects at once instead of waiting out the backoff delay (issue 17).
func TestCloseReconnectsAtOnceAfterLongBackoff(t *testing.T) {
	addr := freeAddr(t)
	failed := make(chan struct{}, 1)
	c, err := New(Config{
		Servers: []Server{{Address: addr}}, BackoffBase: 20 * time.Second, BackoffMax: 30 * time.Second,
		ErrorHandler: func(error) {
			select {
			case failed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	emitN(t, c, "app.late", 0, 1000)
	select {
	case <-failed: // the sender now waits 15-25 s before its next round
	case <-time.After(10 * time.Second):
		t.Fatal("no connect attempt failed")
	}
	s := newTestServer(t, "tcp", addr)
	s.start()
	t.Cleanup(s.stop)
	t0 := time.Now()
	if err := c.CloseContext(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d >= 5*time.Second {
		t.Fatalf("close took %v", d)
	}
	checkSeqs(t, s.waitEvents(1000, 5*time.Second), 1000)
	if st := c.Stats(); st.Sent != 1000 || st.Dropped != 0 || st.Buffered != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Block mode gives up after BlockTimeout (default 10s) instead of waiting for ever.
func TestOverflowBlockTimesOut(t *testing.T) {
	c := newClient(t, Config{
		Servers: []Server{{Address: freeAddr(t)}}, Overflow: OverflowBlock,
		BufferLimit: 8 << 10, ChunkSize: 1 << 10, BlockTimeout: 300 * time.Millisecond,
	})
	var err error
	i := 0
	for ; i < 10_000 && err == nil; i++ {
		err = c.Emit("app.block", record(i))
	}
	if !errors.Is(err, ErrBufferFull) {
		t.Fatalf("emit %d: %v", i, err)
	}
	if st := c.Stats(); st.Dropped != 1 || st.Buffered != uint64(i-1) {
		t.Fatalf("after %d emits: stats %+v", i, st)
	}
	def, err := New(Config{Servers: []Server{{Address: freeAddr(t)}}, Overflow: OverflowBlock})
	if err != nil {
		t.Fatal(err)
	}
	defer def.CloseContext(ctxTimeout(t, 10*time.Millisecond))
	if def.cfg.BlockTimeout != 10*time.Second {
		t.Fatalf("default BlockTimeout %v", def.cfg.BlockTimeout)
	}
}
