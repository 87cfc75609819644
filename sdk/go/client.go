package nagare

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Overflow policies for a full memory buffer.
const (
	OverflowSpill = "spill"
	OverflowBlock = "block"
	OverflowDrop  = "drop"
)

// Errors returned by the client.
var (
	ErrClosed     = errors.New("nagare: client is closed")
	ErrBufferFull = errors.New("nagare: buffer full, event dropped")
	ErrTimeout    = errors.New("nagare: timed out before all events were delivered")
	ErrAckTimeout = errors.New("nagare: no ack within the ack timeout")
	ErrBadTag     = errors.New("nagare: tag must be 1 to 65535 bytes")
	errPeerClosed = errors.New("nagare: connection closed by peer")
)

const maxTagLen = 65535

// closingRetry is how often Close retries the servers until its deadline.
const closingRetry = 100 * time.Millisecond

// maxInflight is how many frames the sender writes before it waits for their
// acks (ack mode): a spill file or a full memory buffer drains without one
// round trip per frame.
const maxInflight = 8

// spillSyncInterval bounds how long an accepted event waits in memory while no
// server is reachable, and how long a spill file write waits for its fsync:
// a kill -9 during an outage loses at most this much (the other SDKs use the
// same interval).
const spillSyncInterval = 200 * time.Millisecond

// Server is one forward endpoint.
type Server struct {
	// Network is "tcp" (default) or "unix".
	Network string
	// Address is host:port for tcp, a socket path for unix.
	Address string
}

// Config configures a Client. Zero values take the defaults named on each
// field.
type Config struct {
	// Servers in order of preference: the first is the primary, the others
	// are failover targets. Default: tcp 127.0.0.1:24224.
	Servers []Server
	// TLS enables TLS on tcp connections when not nil.
	TLS *tls.Config
	// SharedKey enables the HELO/PING/PONG handshake.
	SharedKey string
	// Username and Password are sent when the server asks for user auth.
	Username, Password string
	// Hostname is the client hostname sent in PING. Default: os.Hostname().
	Hostname string

	// RequireAck asks the server to acknowledge every frame ("chunk"
	// option) and resends frames not acknowledged within AckTimeout.
	RequireAck bool
	// AckTimeout. Default 10s.
	AckTimeout time.Duration
	// Compress sends CompressedPackedForward frames (gzip).
	Compress bool

	// BufferLimit is the memory buffer size in bytes. Default 32 MiB.
	BufferLimit int
	// ChunkSize closes a tag's batch when it reaches this many bytes.
	// Default 256 KiB.
	ChunkSize int
	// FlushInterval is the longest time an event waits in a batch before it
	// is queued for sending. Default 100ms.
	FlushInterval time.Duration

	// Overflow says what Emit does when the memory buffer is full:
	// "spill" (write batches to SpillPath), "block" (wait for room) or
	// "drop" (discard the event, counted). Default: "spill" when SpillPath
	// is set, else "drop".
	Overflow string
	// SpillPath is the spill file. Events spilled and not delivered when
	// the process ends are sent by the next client opened on the same path.
	SpillPath string
	// SpillLimit is the spill file size limit in bytes. Default 1 GiB.
	SpillLimit int64

	// DialTimeout bounds connect plus handshake. Default 5s.
	DialTimeout time.Duration
	// WriteTimeout bounds each frame write. Default 10s.
	WriteTimeout time.Duration
	// BackoffBase and BackoffMax bound the reconnect delay, which doubles
	// after each round of failed attempts, with ±25% jitter. Defaults
	// 100ms and 10s.
	BackoffBase, BackoffMax time.Duration
	// PrimaryRetry is how often the primary server is tried while the
	// client is connected to a failover server. Default 10s.
	PrimaryRetry time.Duration
	// CloseTimeout bounds Close. Default 10s.
	CloseTimeout time.Duration
	// BlockTimeout bounds how long Emit waits for room with Overflow
	// "block"; then the event is dropped (ErrBufferFull). Default 10s.
	BlockTimeout time.Duration

	// ErrorHandler receives connection, write and ack errors, and dropped
	// events once per burst (at most once a second, and at Close) as an
	// ErrBufferFull error with the count. It is called from the sender
	// goroutine or a timer and must not block for long.
	ErrorHandler func(error)
}

// Stats are the client's counters.
type Stats struct {
	Sent     uint64 // events written (acknowledged in ack mode)
	Buffered uint64 // events waiting, in memory or in the spill file
	Spilled  uint64 // events ever written to the spill file and fsync'd
	// SpillPending is the part of Buffered that is in the spill file and
	// fsync'd: what a crash now would not lose. After Close it is what the
	// file keeps for the next client.
	SpillPending uint64
	Dropped      uint64 // events discarded (overflow "drop", full spill file, undelivered at Close without spill)
	Reconnects   uint64 // connections opened after the first one
	Errors       uint64 // errors passed to ErrorHandler
}

type chunk struct {
	tag    string
	data   []byte // entries; nil when on disk
	count  int
	serial uint64
	id     string // ack id, set at the first send
	disk   bool
	synced bool // disk and fsync'd: counted in Stats.Spilled and SpillPending
	off    int64
	size   int // bytes of entries on disk
}

// Client sends events to forward servers. It is safe for concurrent use.
type Client struct {
	cfg Config

	mu          sync.Mutex
	cond        *sync.Cond
	staging     map[string]*chunk
	stagedAt    time.Time
	queue       []*chunk // queue[:inflight] is being sent
	inflight    int
	memBytes    int
	nextSerial  uint64
	doneSerial  uint64
	diskChunks  int
	spill       *spillFile
	spillClosed bool   // Close closed the spill file
	outage      bool   // no server reachable: memory goes to the spill file on a timer
	syncArmed   bool   // a spillTick is scheduled
	dropsUnsaid uint64 // drops not yet told to ErrorHandler (one report per burst)
	dropArmed   bool   // a reportDrops is scheduled
	closed      bool
	stats       Stats
	conn        net.Conn // owned by the sender; kept here so Close can interrupt it
	bufPool     sync.Pool
	wake        chan struct{}
	abort       chan struct{}
	closing     chan struct{}   // closed when Close starts: reconnect now, retry often
	abortCtx    context.Context // canceled with abort: interrupts dials
	cancelAbort context.CancelFunc
	senderDone  chan struct{}
	hostname    string
	everConnect bool

	// sender-only state
	dec         *msgpack.Decoder
	connIdx     int
	lastPrimary time.Time
	backoffN    int
	hdr         []byte
}

// New starts a client. Nothing is dialed until there is something to send.
func New(cfg Config) (*Client, error) {
	if len(cfg.Servers) == 0 {
		cfg.Servers = []Server{{Network: "tcp", Address: "127.0.0.1:24224"}}
	}
	for i := range cfg.Servers {
		if cfg.Servers[i].Network == "" {
			cfg.Servers[i].Network = "tcp"
		}
		if n := cfg.Servers[i].Network; n != "tcp" && n != "tcp4" && n != "tcp6" && n != "unix" {
			return nil, fmt.Errorf("nagare: unsupported network %q", n)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.AckTimeout, 10*time.Second)
	def(&cfg.FlushInterval, 100*time.Millisecond)
	def(&cfg.DialTimeout, 5*time.Second)
	def(&cfg.WriteTimeout, 10*time.Second)
	def(&cfg.BackoffBase, 100*time.Millisecond)
	def(&cfg.BackoffMax, 30*time.Second)
	def(&cfg.BlockTimeout, 10*time.Second)
	def(&cfg.PrimaryRetry, 10*time.Second)
	def(&cfg.CloseTimeout, 10*time.Second)
	if cfg.BufferLimit <= 0 {
		cfg.BufferLimit = 32 << 20
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 256 << 10
	}
	if cfg.ChunkSize > cfg.BufferLimit/2 {
		cfg.ChunkSize = cfg.BufferLimit / 2
	}
	if cfg.SpillLimit <= 0 {
		cfg.SpillLimit = 256 << 20
	}
	switch cfg.Overflow {
	case "":
		if cfg.SpillPath != "" {
			cfg.Overflow = OverflowSpill
		} else {
			cfg.Overflow = OverflowDrop
		}
	case OverflowSpill:
		if cfg.SpillPath == "" {
			return nil, errors.New("nagare: overflow \"spill\" needs SpillPath")
		}
	case OverflowBlock, OverflowDrop:
	default:
		return nil, fmt.Errorf("nagare: unknown overflow %q (want spill, block or drop)", cfg.Overflow)
	}
	c := &Client{
		cfg:        cfg,
		staging:    make(map[string]*chunk),
		wake:       make(chan struct{}, 1),
		abort:      make(chan struct{}),
		closing:    make(chan struct{}),
		senderDone: make(chan struct{}),
		hostname:   cfg.Hostname,
	}
	c.cond = sync.NewCond(&c.mu)
	c.abortCtx, c.cancelAbort = context.WithCancel(context.Background())
	if c.hostname == "" {
		c.hostname, _ = os.Hostname()
	}
	if cfg.SpillPath != "" {
		s, old, err := openSpill(cfg.SpillPath, cfg.SpillLimit)
		if err != nil {
			return nil, fmt.Errorf("nagare: open spill file: %w", err)
		}
		c.spill = s
		for _, o := range old {
			c.nextSerial++
			c.queue = append(c.queue, &chunk{tag: o.tag, count: o.count, serial: c.nextSerial, disk: true, synced: true, off: o.off, size: o.size})
			c.diskChunks++
			c.stats.Buffered += uint64(o.count)
			c.stats.SpillPending += uint64(o.count)
		}
	}
	if len(c.queue) > 0 {
		c.signal()
	}
	go c.run()
	return c, nil
}

func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) getBuf() []byte {
	if b, ok := c.bufPool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, c.cfg.ChunkSize+c.cfg.ChunkSize/8)
}

func (c *Client) putBuf(b []byte) {
	if cap(b) > 2*c.cfg.ChunkSize {
		return
	}
	c.bufPool.Put(&b)
}

// Emit sends record with the current time. record must encode as a msgpack
// map: map[string]any, map[string]string, any map with string keys, or a
// struct (fields named by `msgpack` tags). Emit does not block unless
// Overflow is "block".
func (c *Client) Emit(tag string, record any) error {
	return c.EmitWithTime(tag, time.Now(), record)
}

// EmitWithTime sends record with time t (nanosecond precision).
func (c *Client) EmitWithTime(tag string, t time.Time, record any) error {
	e := getEncoder()
	e.buf = append(e.buf, 0x92)
	e.buf = AppendEventTime(e.buf, t)
	if err := e.appendRecord(record); err != nil {
		putEncoder(e)
		return err
	}
	err := c.add(tag, e.buf)
	putEncoder(e)
	return err
}

// EmitRaw sends a record that is already msgpack-encoded (a map).
func (c *Client) EmitRaw(tag string, t time.Time, record []byte) error {
	if len(record) == 0 || !isMapCode(record[0]) {
		return ErrNotMap
	}
	e := getEncoder()
	e.buf = append(e.buf, 0x92)
	e.buf = AppendEventTime(e.buf, t)
	e.buf = append(e.buf, record...)
	err := c.add(tag, e.buf)
	putEncoder(e)
	return err
}

func (c *Client) add(tag string, entry []byte) error {
	if tag == "" || len(tag) > maxTagLen {
		return ErrBadTag
	}
	n := len(entry)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if n > c.cfg.BufferLimit/2 {
		// Can never fit next to a batch in flight.
		c.dropLocked()
		c.mu.Unlock()
		return fmt.Errorf("%w (event of %d bytes, BufferLimit %d)", ErrBufferFull, n, c.cfg.BufferLimit)
	}
	var deadline time.Time // overflow "block": when waiting for room ends
	for c.memBytes+n > c.cfg.BufferLimit {
		switch c.cfg.Overflow {
		case OverflowDrop:
			c.dropLocked()
			c.mu.Unlock()
			return ErrBufferFull
		case OverflowBlock:
			if deadline.IsZero() {
				deadline = time.Now().Add(c.cfg.BlockTimeout)
				// wakes this wait at the deadline if no room was freed before
				wake := time.AfterFunc(c.cfg.BlockTimeout, func() {
					c.mu.Lock()
					c.cond.Broadcast()
					c.mu.Unlock()
				})
				defer wake.Stop()
			} else if !time.Now().Before(deadline) {
				c.dropLocked()
				c.mu.Unlock()
				return fmt.Errorf("%w (no room within BlockTimeout %v)", ErrBufferFull, c.cfg.BlockTimeout)
			}
			c.queueAllStagedLocked() // send what is staged now
			c.signal()
			c.cond.Wait()
			if c.closed {
				c.mu.Unlock()
				return ErrClosed
			}
		case OverflowSpill:
			if !c.spillLocked(n) {
				c.dropLocked()
				c.mu.Unlock()
				return ErrBufferFull
			}
		}
	}
	st := c.staging[tag]
	if st == nil {
		st = &chunk{tag: tag, data: c.getBuf()}
		c.staging[tag] = st
		if len(c.staging) == 1 {
			c.stagedAt = time.Now()
			defer c.signal()
		}
	}
	st.data = append(st.data, entry...)
	st.count++
	c.memBytes += n
	c.stats.Buffered++
	if c.outage {
		c.armSpillTickLocked() // to the spill file within spillSyncInterval
	}
	if len(st.data) >= c.cfg.ChunkSize {
		c.queueLocked(st)
		delete(c.staging, tag)
		defer c.signal()
	}
	c.mu.Unlock()
	return nil
}

func (c *Client) queueLocked(ch *chunk) {
	c.nextSerial++
	ch.serial = c.nextSerial
	c.queue = append(c.queue, ch)
}

func (c *Client) queueAllStagedLocked() {
	for tag, st := range c.staging {
		c.queueLocked(st)
		delete(c.staging, tag)
	}
}

// spillLocked moves in-memory batches to the spill file, oldest first, until
// need more bytes fit in memory. It reports whether they fit.
func (c *Client) spillLocked(need int) bool {
	if c.spill == nil {
		return false
	}
	c.queueAllStagedLocked()
	first := c.inflight
	// Oldest first, so the file holds batches in sending order.
	for i := first; i < len(c.queue) && c.memBytes+need > c.cfg.BufferLimit; i++ {
		if err := c.spillChunkLocked(c.queue[i]); err != nil {
			return false
		}
	}
	return c.memBytes+need <= c.cfg.BufferLimit
}

func (c *Client) spillChunkLocked(ch *chunk) error {
	if ch.disk {
		return nil
	}
	off, err := c.spill.append(ch.tag, ch.count, ch.data)
	if err != nil {
		return err
	}
	c.memBytes -= len(ch.data)
	ch.size = len(ch.data)
	c.putBuf(ch.data)
	ch.data = nil
	ch.disk = true
	ch.off = off
	c.diskChunks++
	c.armSpillTickLocked() // fsync within spillSyncInterval
	return nil
}

// dropReportInterval: ErrorHandler hears of dropped events at most this often,
// once per burst with the count (Emit returns ErrBufferFull for each).
const dropReportInterval = time.Second

// dropLocked counts one dropped event and schedules its report.
func (c *Client) dropLocked() {
	c.stats.Dropped++
	c.dropsUnsaid++
	if !c.dropArmed && c.cfg.ErrorHandler != nil {
		c.dropArmed = true
		time.AfterFunc(dropReportInterval, c.reportDrops)
	}
}

// reportDrops tells ErrorHandler how many events were dropped since the last report.
func (c *Client) reportDrops() {
	c.mu.Lock()
	n := c.dropsUnsaid
	c.dropsUnsaid = 0
	c.dropArmed = false
	c.mu.Unlock()
	if n > 0 {
		c.report(fmt.Errorf("%w: %d events dropped", ErrBufferFull, n))
	}
}

// armSpillTickLocked schedules a spillTick unless one is scheduled already.
func (c *Client) armSpillTickLocked() {
	if c.syncArmed || c.spill == nil || c.spillClosed {
		return
	}
	c.syncArmed = true
	time.AfterFunc(spillSyncInterval, c.spillTick)
}

// spillTick runs spillSyncInterval after a spill file write or, during an
// outage, after an emit: it moves what waits in memory to the file (outage
// only) and fsyncs it; only then are the events counted as spilled.
func (c *Client) spillTick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncArmed = false
	if c.spillClosed {
		return
	}
	if c.outage {
		c.spillAllLocked()
	}
	c.syncSpillLocked()
}

// spillAllLocked moves every batch waiting in memory to the spill file, in
// sending order. Only while no server is reachable: the sender is then not
// writing any batch, so the batches it holds can move too.
//
// The file must hold the batches in sending order, or a kill -9 during the
// outage leaves them out of order for the next client. Appending keeps that
// order only when no batch in memory is older than one on disk. The batch the
// sender held while memory filled up (during the first, failing connect) is:
// the later ones were spilled for room first. Then the file is rewritten.
func (c *Client) spillAllLocked() {
	c.queueAllStagedLocked()
	if !c.spillAppendKeepsOrderLocked() {
		if err := c.rewriteSpillLocked(); err == nil {
			c.cond.Broadcast() // block-mode emitters: memory was freed
		}
		// else: a full or failing file; memory keeps what it has, as without spill
		return
	}
	for _, ch := range c.queue {
		if err := c.spillChunkLocked(ch); err != nil {
			// full or failing file: the rest waits in memory, as without spill
			return
		}
	}
	c.cond.Broadcast() // block-mode emitters: memory was freed
}

// spillAppendKeepsOrderLocked reports whether appending the queued batches
// that are in memory leaves the file in sending order: the batches on disk
// are in the file in queue order, and none in memory comes before one of them.
func (c *Client) spillAppendKeepsOrderLocked() bool {
	last := int64(-1)
	inMemory := false
	for _, ch := range c.queue {
		if !ch.disk {
			inMemory = true
			continue
		}
		if inMemory || ch.off < last {
			return false
		}
		last = ch.off
	}
	return true
}

// rewriteSpillLocked writes every queued batch (in memory or on disk) to a
// new spill file in sending order, fsyncs it and puts it in place of the old
// one: all of them are then on disk, at their new offsets. The sender must
// not be reading the file (no server is reachable, or the sender stopped).
func (c *Client) rewriteSpillLocked() error {
	path := c.cfg.SpillPath
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	out, _, err := openSpill(tmp, c.cfg.SpillLimit)
	if err != nil {
		return err
	}
	offs := make([]int64, len(c.queue))
	for i, ch := range c.queue {
		data := ch.data
		if ch.disk {
			if data, err = c.spill.read(ch.tag, ch.off, ch.size); err != nil {
				break
			}
		}
		if offs[i], err = out.append(ch.tag, ch.count, data); err != nil {
			break
		}
	}
	if err == nil {
		err = out.f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		out.f.Close()
		os.Remove(tmp)
		return fmt.Errorf("nagare: rewriting the spill file: %w", err)
	}
	c.spill.f.Close()
	c.spill = out
	for i, ch := range c.queue {
		if !ch.disk {
			c.memBytes -= len(ch.data)
			ch.size = len(ch.data)
			c.putBuf(ch.data)
			ch.data = nil
			ch.disk = true
			c.diskChunks++
		}
		ch.off = offs[i]
	}
	c.markSyncedLocked() // the new file is fsync'd
	return nil
}

// syncSpillLocked fsyncs the spill file and counts what it made durable.
func (c *Client) syncSpillLocked() {
	fresh := false
	for _, ch := range c.queue {
		if ch.disk && !ch.synced {
			fresh = true
			break
		}
	}
	if !fresh {
		return
	}
	if err := c.spill.f.Sync(); err != nil {
		c.armSpillTickLocked() // try again; the events stay counted as buffered
		return
	}
	c.markSyncedLocked()
}

// markSyncedLocked counts the batches on disk not yet counted as spilled,
// after an fsync.
func (c *Client) markSyncedLocked() {
	for _, ch := range c.queue {
		if ch.disk && !ch.synced {
			ch.synced = true
			c.stats.Spilled += uint64(ch.count)
			c.stats.SpillPending += uint64(ch.count)
		}
	}
}

// Flush queues every buffered event for sending and waits until all events
// emitted before the call are delivered, or ctx ends.
func (c *Client) Flush(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.queueAllStagedLocked()
	return c.waitLocked(ctx, c.nextSerial)
}

func (c *Client) waitLocked(ctx context.Context, target uint64) error {
	if c.doneSerial >= target {
		return nil
	}
	c.signal()
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	for c.doneSerial < target {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%d events buffered)", ErrTimeout, c.stats.Buffered)
		}
		c.cond.Wait()
	}
	return nil
}

// Close delivers what is buffered within CloseTimeout, then stops. Events
// still undelivered are kept in the spill file when SpillPath is set (the
// next client on that path sends them), otherwise counted as dropped.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CloseTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext is Close with a context instead of CloseTimeout.
func (c *Client) CloseContext(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	c.cond.Broadcast() // wake blocked emitters
	c.queueAllStagedLocked()
	werr := c.waitLocked(ctx, c.nextSerial)
	close(c.abort)
	c.cancelAbort()
	if c.conn != nil {
		_ = c.conn.SetDeadline(time.Now())
	}
	c.mu.Unlock()
	<-c.senderDone

	var unsaid uint64 // drops not reported yet: told after the lock is released
	defer func() {
		if unsaid > 0 {
			c.report(fmt.Errorf("%w: %d events dropped", ErrBufferFull, unsaid))
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	var lost uint64
	if c.spill != nil {
		var err error
		lost, err = c.persistLocked()
		if err != nil && werr == nil {
			werr = err
		}
	} else {
		for _, ch := range c.queue {
			lost += uint64(ch.count)
		}
	}
	c.stats.Dropped += lost
	c.stats.Buffered -= lost
	if werr != nil && lost > 0 {
		werr = fmt.Errorf("%w: %d events lost", werr, lost)
	}
	unsaid, c.dropsUnsaid = c.dropsUnsaid, 0
	return werr
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Client) report(err error) {
	c.mu.Lock()
	c.stats.Errors++
	c.mu.Unlock()
	if c.cfg.ErrorHandler != nil {
		c.cfg.ErrorHandler(err)
	}
}

func (c *Client) aborted() bool {
	select {
	case <-c.abort:
		return true
	default:
		return false
	}
}

// run is the sender goroutine.
func (c *Client) run() {
	defer close(c.senderDone)
	defer c.dropConn()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		batch := c.next(timer)
		if batch == nil {
			return
		}
		for len(batch) > 0 {
			if c.aborted() {
				c.mu.Lock()
				c.inflight = 0
				c.mu.Unlock()
				return
			}
			conn := c.ensureConn()
			if conn == nil {
				continue // aborted
			}
			delivered, err := c.sendAll(conn, batch)
			rest := batch[:0:0]
			for i, ch := range batch {
				if delivered[i] {
					c.commit(ch)
				} else {
					rest = append(rest, ch)
				}
			}
			batch = rest
			if err != nil {
				if !c.aborted() {
					c.report(err)
				}
				c.dropConn()
			}
		}
	}
}

// next waits for batches to send: the first maxInflight of the queue in ack
// mode, else the first one. It returns nil when the client aborts.
func (c *Client) next(timer *time.Timer) []*chunk {
	c.mu.Lock()
	for {
		if len(c.queue) > 0 {
			n := 1
			if c.cfg.RequireAck {
				n = min(len(c.queue), maxInflight)
			}
			c.inflight = n
			batch := append([]*chunk(nil), c.queue[:n]...)
			c.mu.Unlock()
			return batch
		}
		var wait time.Duration = -1
		if len(c.staging) > 0 {
			wait = c.cfg.FlushInterval - time.Since(c.stagedAt)
			if wait <= 0 {
				c.queueAllStagedLocked()
				continue
			}
		}
		c.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-c.wake:
		case <-timer.C:
		case <-c.abort:
			stopTimer(timer)
			return nil
		}
		stopTimer(timer)
		c.mu.Lock()
	}
}

func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}

func (c *Client) commit(ch *chunk) {
	c.mu.Lock()
	// ch is among the batches in flight; acks may come out of order
	for i := 0; i < c.inflight; i++ {
		if c.queue[i] == ch {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			break
		}
	}
	if len(c.queue) == 0 {
		c.queue = nil
	}
	c.inflight--
	if ch.disk {
		_ = c.spill.markDone(ch.off)
		if ch.synced {
			c.stats.SpillPending -= uint64(ch.count)
		}
		c.diskChunks--
		if c.diskChunks == 0 {
			_ = c.spill.reset()
		}
	} else {
		c.memBytes -= len(ch.data)
		c.putBuf(ch.data)
		ch.data = nil
	}
	c.stats.Sent += uint64(ch.count)
	c.stats.Buffered -= uint64(ch.count)
	// every batch before the first one still queued is delivered
	if len(c.queue) > 0 {
		c.doneSerial = c.queue[0].serial - 1
	} else {
		c.doneSerial = max(c.doneSerial, ch.serial)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

func newChunkID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// sendAll writes one PackedForward frame per batch and, in ack mode, waits for
// their acks. It reports which batches were delivered (written, or
// acknowledged in ack mode); on an error the others are sent again over a new
// connection, with the same chunk ids.
func (c *Client) sendAll(conn net.Conn, batch []*chunk) ([]bool, error) {
	delivered := make([]bool, len(batch))
	for i, ch := range batch {
		if err := c.write(conn, ch); err != nil {
			if c.cfg.RequireAck {
				return delivered, err // acks of the frames before are not read: resent, deduplicated by id
			}
			return delivered, err
		}
		delivered[i] = !c.cfg.RequireAck
	}
	for left := len(batch); c.cfg.RequireAck && left > 0; {
		if err := conn.SetReadDeadline(time.Now().Add(c.cfg.AckTimeout)); err != nil {
			return delivered, err
		}
		m, err := c.dec.DecodeMap()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return delivered, fmt.Errorf("%w (chunk %s)", ErrAckTimeout, firstUnacked(batch, delivered))
			}
			return delivered, fmt.Errorf("nagare: reading ack: %w", err)
		}
		id, _ := rawBytes(m["ack"])
		for i, ch := range batch {
			if !delivered[i] && ch.id == string(id) {
				delivered[i] = true
				left--
				break
			}
		}
	}
	return delivered, nil
}

func firstUnacked(batch []*chunk, delivered []bool) string {
	for i, ch := range batch {
		if !delivered[i] {
			return ch.id
		}
	}
	return ""
}

// write writes one PackedForward frame (with a chunk id in ack mode).
func (c *Client) write(conn net.Conn, ch *chunk) error {
	c.mu.Lock()
	data := ch.data
	disk := ch.disk
	sp, off, size := c.spill, ch.off, ch.size
	c.mu.Unlock()
	if disk {
		var err error
		if data, err = sp.read(ch.tag, off, size); err != nil {
			return err
		}
	}
	opt := Options{Size: ch.count}
	if c.cfg.RequireAck {
		if ch.id == "" {
			ch.id = newChunkID()
		}
		opt.Chunk = ch.id
	}
	if c.cfg.Compress {
		z, err := gzipBytes(data)
		if err != nil {
			return err
		}
		data = z
		opt.Compressed = "gzip"
	}
	c.hdr = appendPackedHeader(c.hdr[:0], ch.tag, len(data))
	hdrLen := len(c.hdr)
	c.hdr = appendOptions(c.hdr, opt, true)
	bufs := net.Buffers{c.hdr[:hdrLen], data, c.hdr[hdrLen:]}
	if err := conn.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout)); err != nil {
		return err
	}
	if _, err := bufs.WriteTo(conn); err != nil {
		return fmt.Errorf("nagare: write: %w", err)
	}
	return nil
}

func (c *Client) dropConn() {
	c.mu.Lock()
	conn := c.conn
	c.conn = nil
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	c.dec = nil
}

// alive checks, before a write, that the peer has not closed the connection.
func alive(conn net.Conn, ackMode bool) bool {
	raw := conn
	tc, isTLS := conn.(*tls.Conn)
	if isTLS {
		raw = tc.NetConn()
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return true
	}
	closed, pending, ok := peekClosed(sc)
	if !ok {
		return true
	}
	if closed {
		return false
	}
	if pending && isTLS && !ackMode {
		// TLS records (session tickets, close_notify): let TLS read them.
		var b [1]byte
		_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := conn.Read(b[:])
		_ = conn.SetReadDeadline(time.Time{})
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return true
			}
			return false
		}
	}
	return true
}

// ensureConn returns a live connection, dialing with failover and backoff.
// It returns nil when the client aborts.
func (c *Client) ensureConn() net.Conn {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		if c.connIdx != 0 && time.Since(c.lastPrimary) >= c.cfg.PrimaryRetry {
			c.lastPrimary = time.Now()
			if p, dec, err := c.dial(0); err == nil {
				c.dropConn()
				c.setConn(p, dec, 0)
				return p
			}
		}
		if alive(conn, c.cfg.RequireAck) {
			return conn
		}
		c.report(fmt.Errorf("%w (%s)", errPeerClosed, c.cfg.Servers[c.connIdx].Address))
		c.dropConn()
	}
	for {
		for i := range c.cfg.Servers {
			if c.aborted() {
				return nil
			}
			conn, dec, err := c.dial(i)
			if err != nil {
				if !c.aborted() {
					c.report(err)
				}
				continue
			}
			if c.aborted() {
				conn.Close()
				return nil
			}
			c.setConn(conn, dec, i)
			c.backoffN = 0
			return conn
		}
		c.startOutage()
		d := c.backoff(c.backoffN)
		c.backoffN++
		closing := c.closing
		select {
		case <-c.closing:
			// Close is waiting: keep trying until its deadline, a short delay apart
			d = min(d, closingRetry)
			closing = nil
		default:
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-closing: // Close was called: retry now, not after the backoff
			t.Stop()
		case <-c.abort:
			t.Stop()
			return nil
		}
	}
}

// startOutage is called after a round in which no server answered: with a
// spill file and overflow "spill", what waits in memory goes to the file now
// and what is emitted until a server answers follows within spillSyncInterval,
// so a kill -9 of the application during the outage loses at most that much.
func (c *Client) startOutage() {
	if c.spill == nil || c.cfg.Overflow != OverflowSpill {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spillClosed {
		return
	}
	c.outage = true
	c.spillAllLocked()
	c.armSpillTickLocked()
}

func (c *Client) setConn(conn net.Conn, dec *msgpack.Decoder, idx int) {
	c.mu.Lock()
	c.outage = false // before the sender writes any batch: spillAllLocked must not move it
	c.conn = conn
	if c.everConnect {
		c.stats.Reconnects++
	}
	c.everConnect = true
	c.mu.Unlock()
	c.dec = dec
	c.connIdx = idx
	if idx != 0 {
		c.lastPrimary = time.Now()
	}
}

// backoff returns the delay after n failed rounds: base·2ⁿ capped at max,
// times a random factor in [0.75, 1.25).
func (c *Client) backoff(n int) time.Duration {
	d := c.cfg.BackoffBase
	for i := 0; i < n && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	if d > c.cfg.BackoffMax {
		d = c.cfg.BackoffMax
	}
	return time.Duration(float64(d) * (0.75 + 0.5*mrand.Float64()))
}

func (c *Client) dial(i int) (net.Conn, *msgpack.Decoder, error) {
	s := c.cfg.Servers[i]
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	var conn net.Conn
	var err error
	ctx, cancel := context.WithTimeout(c.abortCtx, c.cfg.DialTimeout)
	defer cancel()
	if c.cfg.TLS != nil && s.Network != "unix" {
		td := tls.Dialer{NetDialer: &d, Config: c.cfg.TLS}
		conn, err = td.DialContext(ctx, s.Network, s.Address)
	} else {
		conn, err = d.DialContext(ctx, s.Network, s.Address)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("nagare: connect %s %s: %w", s.Network, s.Address, err)
	}
	dec := msgpack.NewDecoder(conn)
	if c.cfg.SharedKey != "" {
		_ = conn.SetDeadline(time.Now().Add(c.cfg.DialTimeout))
		stop := context.AfterFunc(c.abortCtx, func() { _ = conn.SetDeadline(time.Now()) })
		var salt [16]byte
		_, _ = rand.Read(salt[:])
		err := handshake(conn, dec, c.hostname, c.cfg.SharedKey, c.cfg.Username, c.cfg.Password, []byte(hex.EncodeToString(salt[:])))
		stop()
		_ = conn.SetDeadline(time.Time{})
		if err != nil {
			conn.Close()
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: connection closed during handshake", ErrAuth)
			}
			return nil, nil, fmt.Errorf("nagare: %s %s: %w", s.Network, s.Address, err)
		}
	}
	return conn, dec, nil
}

// persistLocked writes every undelivered batch to the spill file, in sending
// order, for the next client on that path. It returns the events it could not
// keep.
func (c *Client) persistLocked() (lost uint64, err error) {
	defer func() {
		c.spillClosed = true
		cerr := c.spill.close() // fsyncs
		if cerr != nil {
			if err == nil {
				err = cerr
			}
			return
		}
		if err == nil {
			// every batch left is now in the file
			for _, ch := range c.queue {
				ch.disk = true
			}
		}
		c.markSyncedLocked()
	}()
	// Batches in memory are appended when that keeps the sending order, else
	// the file is rewritten (see spillAllLocked).
	if c.spillAppendKeepsOrderLocked() {
		for _, ch := range c.queue {
			if err = c.spillChunkLocked(ch); err != nil {
				break
			}
		}
	} else {
		err = c.rewriteSpillLocked()
	}
	if err == nil {
		return 0, nil
	}
	for _, ch := range c.queue {
		if !ch.disk {
			lost += uint64(ch.count)
		}
	}
	return lost, fmt.Errorf("nagare: writing the spill file at close: %w", err)
}
