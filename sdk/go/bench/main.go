// Command bench emits events from one goroutine into a forward sink with the
// nagare Go client or with fluent-logger-golang, and prints one JSON line:
// the emit loop's duration and cost per call, and the time until the client
// reported everything delivered (Close returned). The sink's own count is
// the authority on delivery; run.sh pairs this with flowbench sink, or with
// the nagare daemon (-metrics: after Close, poll its monitor until the null
// output counted every event, and time to that moment).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
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
	Received     *int64  `json:"received,omitempty"`
	Error        string  `json:"error,omitempty"`
}

func main() {
	lib := flag.String("lib", "nagare", "nagare or fluent")
	addr := flag.String("addr", "127.0.0.1:24224", "forward sink address")
	n := flag.Int("n", 2000000, "events to emit")
	size := flag.Int("size", 100, "bytes in each record's message")
	tag := flag.String("tag", "bench.go", "tag")
	metrics := flag.String("metrics", "", "nagare monitor URL (http://HOST:PORT/metrics): after Close, "+
		"wait until its null output counted -n events; total_s ends then")
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

	if *metrics != "" {
		// connect to the monitor once before the clock starts
		if _, _, err := waitCount(*metrics, 0, 10*time.Second); err != nil {
			fail(err)
		}
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
	if *metrics != "" {
		got, at, err := waitCount(*metrics, int64(*n), time.Minute)
		r.Received = &got
		end = at
		if err != nil {
			r.Error = err.Error()
		}
	}
	r.EmitSeconds = emitDone.Sub(start).Seconds()
	r.NsPerEmit = float64(emitDone.Sub(start).Nanoseconds()) / float64(*n)
	r.EmitPerS = float64(*n) / r.EmitSeconds
	r.TotalSeconds = end.Sub(start).Seconds()
	r.DeliveredPS = float64(*n-r.EmitErrors) / r.TotalSeconds
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

// nullIn is the monitor's count of events that reached nagare's null output.
const nullIn = `nagare_events_in_total{plugin="null#0",kind="output",type="null"} `

// waitCount polls a nagare monitor until the null output counted want events
// and returns the count and the moment it was seen (or an error after limit).
func waitCount(url string, want int64, limit time.Duration) (int64, time.Time, error) {
	deadline := time.Now().Add(limit)
	got := int64(-1)
	for {
		resp, err := http.Get(url)
		if err == nil {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), nullIn); ok {
					got, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				}
			}
			_ = resp.Body.Close()
		}
		now := time.Now()
		if got >= want {
			return got, now, nil
		}
		if now.After(deadline) {
			return got, now, fmt.Errorf("nagare counted %d of %d events after %v", got, want, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
