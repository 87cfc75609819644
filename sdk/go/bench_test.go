package nagare

import (
	"io"
	"net"
	"strings"
	"testing"
)

// BenchmarkEmit measures Emit with a 100-byte record into a loopback server
// that discards what it reads:  go test -run '^$' -bench Emit
func BenchmarkEmit(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	c, err := New(Config{Servers: []Server{{Address: ln.Addr().String()}}, Overflow: OverflowBlock})
	if err != nil {
		b.Fatal(err)
	}
	rec := map[string]any{"seq": 0, "message": strings.Repeat("x", 100)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec["seq"] = i
		if err := c.Emit("bench.go", rec); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	if st := c.Stats(); st.Sent != uint64(b.N) {
		b.Fatalf("sent %d of %d", st.Sent, b.N)
	}
}
