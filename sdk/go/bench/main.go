// Command bench emits events from one goroutine into a forward sink with the
// nagare Go client or with fluent-logger-golang, and prints one JSON line:
// the emit loop's duration and cost per call, and the time until the client
// reported everything delivered (Close returned). The sink's own count is
// the authority on delivery; run.sh pairs this with flowbench sink.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fluent/fluent-logger-golang/fluent"
	nagare "github.com/nagare-log/nagare/sdk/go"
)

type result struct {
	Lib          string  `json:"lib"`
	Events       int     `json:"events"`
	EmitErrors   int     `json:"emit_errors"`
	EmitSeconds  float64 `json:"emit_s"`
	NsPerEmit    float64 `json:"ns_per_emit"`
	EmitPerS     float64 `json:"emit_events_per_s"`
	TotalSeconds float64 `json:"total_s"`
	DeliveredPS  float64 `json:"client_events_per_s"`
	Error        string  `json:"error,omitempty"`
}

func main() {
	lib := flag.String("lib", "nagare", "nagare or fluent")
	addr := flag.String("addr", "127.0.0.1:24224", "forward sink address")
	n := flag.Int("n", 2000000, "events to emit")
	size := flag.Int("size", 100, "bytes in each record's message")
	tag := flag.String("tag", "bench.go", "tag")
	flag.Parse()

	msg := strings.Repeat("x", *size)
	r := result{Lib: *lib, Events: *n}
	var emit func(i int) error
	var closeFn func() error
	switch *lib {
	case "nagare":
		c, err := nagare.New(nagare.Config{
			Servers: []nagare.Server{{Address: *addr}},
			// Block rather than drop, so every event is delivered and the
			// figure is the sustained rate.
			Overflow:     nagare.OverflowBlock,
			CloseTimeout: 5 * time.Minute,
		})
		if err != nil {
			fail(err)
		}
		rec := map[string]any{"seq": 0, "message": msg}
		emit = func(i int) error {
			rec["seq"] = i
			return c.Emit(*tag, rec)
		}
		closeFn = c.Close
	case "fluent":
		host, portStr, err := net.SplitHostPort(*addr)
		if err != nil {
			fail(err)
		}
		port, _ := strconv.Atoi(portStr)
		f, err := fluent.New(fluent.Config{
			FluentHost: host, FluentPort: port, Async: true,
			// A queue large enough that nothing is dropped.
			BufferLimit:        *n,
			SubSecondPrecision: true,
		})
		if err != nil {
			fail(err)
		}
		rec := map[string]any{"seq": 0, "message": msg}
		emit = func(i int) error {
			rec["seq"] = i
			return f.PostWithTime(*tag, time.Now(), rec)
		}
		closeFn = f.Close
	default:
		fail(fmt.Errorf("unknown -lib %q", *lib))
	}

	start := time.Now()
	for i := 0; i < *n; i++ {
		if err := emit(i); err != nil {
			r.EmitErrors++
		}
	}
	emitDone := time.Now()
	if err := closeFn(); err != nil {
		r.Error = err.Error()
	}
	end := time.Now()
	r.EmitSeconds = emitDone.Sub(start).Seconds()
	r.NsPerEmit = float64(emitDone.Sub(start).Nanoseconds()) / float64(*n)
	r.EmitPerS = float64(*n) / r.EmitSeconds
	r.TotalSeconds = end.Sub(start).Seconds()
	r.DeliveredPS = float64(*n-r.EmitErrors) / r.TotalSeconds
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
