package nagare

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// testServer is a scripted forward server for the tests: it decodes every
// frame mode, records events, answers acks as told, and can be stopped and
// restarted on the same address.
type testServer struct {
	t       *testing.T
	network string
	addr    string

	// behaviour (set before start or under mu)
	mu        sync.Mutex
	sharedKey string
	tlsConfig *tls.Config
	skipAcks  int // number of frames to leave unacknowledged
	ackDelay  time.Duration
	// ackLater sends each ack this long after its frame, from another
	// goroutine, while the server reads on; maxUnacked is the most frames of
	// one connection that were read and not yet acknowledged at once
	ackLater   time.Duration
	maxUnacked int

	events   []Entry
	tags     []string
	frames   int
	chunkIDs []string
	conns    int
	authFail int
	cond     *sync.Cond

	ln      net.Listener
	open    map[net.Conn]struct{}
	wg      sync.WaitGroup
	running bool
}

func newTestServer(t *testing.T, network, addr string) *testServer {
	s := &testServer{t: t, network: network, addr: addr, open: map[net.Conn]struct{}{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// startTestServer starts a server on a free loopback port.
func startTestServer(t *testing.T) *testServer {
	s := newTestServer(t, "tcp", "127.0.0.1:0")
	s.start()
	t.Cleanup(s.stop)
	return s
}

// freeAddr returns a loopback address nobody listens on (for now).
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func (s *testServer) start() {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after a stop
		ln, err = net.Listen(s.network, s.addr)
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("listen %s: %v", s.addr, err)
	}
	if s.tlsConfig != nil {
		ln = tls.NewListener(ln, s.tlsConfig)
	}
	s.mu.Lock()
	s.ln = ln
	s.addr = ln.Addr().String()
	s.running = true
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln)
}

func (s *testServer) server() Server {
	return Server{Network: s.network, Address: s.addr}
}

// stop closes the listener and every connection, after reading what
// clients already sent.
func (s *testServer) stop() {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	s.running = false
	s.ln.Close()
	for c := range s.open {
		// Let the reader drain what is already in the socket, then close.
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *testServer) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if !s.running {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.open[c] = struct{}{}
		s.conns++
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *testServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
		c.Close()
	}()
	d := msgpack.NewDecoder(c)
	s.mu.Lock()
	key := s.sharedKey
	s.mu.Unlock()
	if key != "" && !s.handshake(c, d, key) {
		return
	}
	var writeMu sync.Mutex // acks written later (ackLater) share the connection
	unacked := 0           // under s.mu
	for {
		s.mu.Lock()
		if !s.running {
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		}
		s.mu.Unlock()
		f, err := decodeFrame(d)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.frames++
		chunk, _ := f.Options["chunk"].(string)
		if chunk != "" {
			s.chunkIDs = append(s.chunkIDs, chunk)
		}
		skip := false
		if chunk != "" && s.skipAcks > 0 {
			s.skipAcks--
			skip = true
		}
		if !skip {
			for _, e := range f.Entries {
				s.events = append(s.events, e)
				s.tags = append(s.tags, f.Tag)
			}
		}
		delay := s.ackDelay
		later := s.ackLater
		if chunk != "" && !skip && later > 0 {
			unacked++
			s.maxUnacked = max(s.maxUnacked, unacked)
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if chunk != "" && !skip && later > 0 {
			go func() {
				time.Sleep(later)
				s.mu.Lock() // before the ack leaves: the client may answer it at once
				unacked--
				s.mu.Unlock()
				ack, _ := msgpack.Marshal(map[string]any{"ack": chunk})
				writeMu.Lock()
				_, _ = c.Write(ack)
				writeMu.Unlock()
			}()
			continue
		}
		if chunk != "" && !skip {
			if delay > 0 {
				time.Sleep(delay)
			}
			ack, _ := msgpack.Marshal(map[string]any{"ack": chunk})
			if _, err := c.Write(ack); err != nil {
				return
			}
		}
	}
}

func (s *testServer) handshake(c net.Conn, d *msgpack.Decoder, key string) bool {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	helo, _ := msgpack.Marshal([]any{"HELO", map[string]any{"nonce": nonce, "auth": []byte{}, "keepalive": true}})
	if _, err := c.Write(helo); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ping []any
	if err := d.Decode(&ping); err != nil || len(ping) != 6 || ping[0] != "PING" {
		return false
	}
	_ = c.SetReadDeadline(time.Time{})
	host, _ := ping[1].(string)
	salt, _ := rawBytes(ping[2])
	digest, _ := ping[3].(string)
	ok := digest == PingDigest(salt, host, nonce, key)
	reason := ""
	if !ok {
		reason = "shared key mismatch"
		s.mu.Lock()
		s.authFail++
		s.mu.Unlock()
	}
	pong, _ := msgpack.Marshal([]any{"PONG", ok, reason, "test-server", PingDigest(salt, "test-server", nonce, key)})
	if _, err := c.Write(pong); err != nil {
		return false
	}
	return ok
}

// waitEvents waits until the server holds at least n events.
func (s *testServer) waitEvents(n int, timeout time.Duration) []Entry {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.events) < n && time.Now().Before(deadline) {
		s.cond.Wait()
	}
	out := append([]Entry(nil), s.events...)
	if len(out) < n {
		s.t.Fatalf("server got %d events within %v, want %d", len(out), timeout, n)
	}
	return out
}

func (s *testServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// seqs returns the "seq" field of each event.
func seqs(t *testing.T, es []Entry) []int {
	t.Helper()
	out := make([]int, len(es))
	for i, e := range es {
		switch v := e.Record["seq"].(type) {
		case int8:
			out[i] = int(v)
		case int16:
			out[i] = int(v)
		case int32:
			out[i] = int(v)
		case int64:
			out[i] = int(v)
		case uint8:
			out[i] = int(v)
		case uint16:
			out[i] = int(v)
		case uint32:
			out[i] = int(v)
		case uint64:
			out[i] = int(v)
		default:
			t.Fatalf("event %d: seq %T %v", i, v, v)
		}
	}
	return out
}

// checkSeqs verifies that the events are exactly seq 0..n-1 in order.
func checkSeqs(t *testing.T, es []Entry, n int) {
	t.Helper()
	got := seqs(t, es)
	if len(got) != n {
		t.Fatalf("got %d events, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("event %d has seq %d (order or loss problem)", i, v)
		}
	}
}

// checkSeqsOnce verifies every seq in 0..n-1 arrived exactly once, in any order.
func checkSeqsOnce(t *testing.T, es []Entry, n int) {
	t.Helper()
	got := seqs(t, es)
	seen := make([]int, n)
	for _, v := range got {
		if v < 0 || v >= n {
			t.Fatalf("unexpected seq %d", v)
		}
		seen[v]++
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("seq %d arrived %d times", i, k)
		}
	}
}

// checkAllSeqs verifies every seq in 0..n-1 arrived at least once.
func checkAllSeqs(t *testing.T, es []Entry, n int) {
	t.Helper()
	seen := make([]bool, n)
	for _, v := range seqs(t, es) {
		if v < 0 || v >= n {
			t.Fatalf("unexpected seq %d", v)
		}
		seen[v] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("seq %d lost", i)
		}
	}
}

func record(seq int) map[string]any {
	return map[string]any{"seq": seq, "message": fmt.Sprintf("event number %d", seq)}
}

// errLog collects errors passed to ErrorHandler with their times.
type errLog struct {
	mu    sync.Mutex
	errs  []error
	times []time.Time
}

func (l *errLog) handle(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.times = append(l.times, time.Now())
	l.mu.Unlock()
}

func (l *errLog) snapshot() ([]error, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...), append([]time.Time(nil), l.times...)
}

func (l *errLog) has(target error) bool {
	errs, _ := l.snapshot()
	for _, e := range errs {
		if errors.Is(e, target) {
			return true
		}
	}
	return false
}
