// Command conformance-driver drives the Go library for the conformance suite
// (protocol: sdk/conformance/README.md): one command per line on stdin, one
// JSON reply per line on stdout.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	nagare "github.com/nagare-log/nagare/sdk/go"
)

type options struct {
	Servers       []string `json:"servers"`
	SpillPath     string   `json:"spill_path"`
	RequireAck    bool     `json:"require_ack"`
	BackoffBaseMs int      `json:"backoff_base_ms"`
	BackoffMaxMs  int      `json:"backoff_max_ms"`
	BufferBytes   int      `json:"buffer_bytes"`
	Overflow      string   `json:"overflow"`
	TLSCA         string   `json:"tls_ca"`
}

func main() {
	var c *nagare.Client
	seqs := map[string]int{}
	// connection attempts refused (the runner waits on it, not on sleeps)
	var refused atomic.Int64
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		var reply any
		switch cmd {
		case "configure":
			var o options
			if err := json.Unmarshal([]byte(arg), &o); err != nil {
				reply = map[string]any{"error": err.Error()}
				break
			}
			cfg := nagare.Config{
				SpillPath:   o.SpillPath,
				RequireAck:  o.RequireAck,
				BackoffBase: time.Duration(o.BackoffBaseMs) * time.Millisecond,
				BackoffMax:  time.Duration(o.BackoffMaxMs) * time.Millisecond,
				BufferLimit: o.BufferBytes,
				Overflow:    o.Overflow,
				ErrorHandler: func(err error) {
					if errors.Is(err, syscall.ECONNREFUSED) {
						refused.Add(1)
					}
				},
			}
			if o.TLSCA != "" {
				pem, err := os.ReadFile(o.TLSCA)
				if err != nil {
					reply = map[string]any{"error": err.Error()}
					break
				}
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				cfg.TLS = &tls.Config{RootCAs: pool}
			}
			for _, s := range o.Servers {
				if p, ok := strings.CutPrefix(s, "unix://"); ok {
					cfg.Servers = append(cfg.Servers, nagare.Server{Network: "unix", Address: p})
				} else {
					cfg.Servers = append(cfg.Servers, nagare.Server{Address: s})
				}
			}
			var err error
			if c, err = nagare.New(cfg); err != nil {
				reply = map[string]any{"error": err.Error()}
			} else {
				reply = map[string]any{"ok": true}
			}
		case "emit":
			tag, ns, _ := strings.Cut(arg, " ")
			n, _ := strconv.Atoi(ns)
			start := seqs[tag]
			seqs[tag] = start + n
			accepted := 0
			for i := start; i < start+n; i++ {
				if c.Emit(tag, map[string]any{"seq": i}) == nil {
					accepted++
				}
			}
			reply = map[string]any{"accepted": accepted}
		case "log":
			// through the slog integration: message "seq N", seq also an attribute
			tag, ns, _ := strings.Cut(arg, " ")
			n, _ := strconv.Atoi(ns)
			start := seqs[tag]
			seqs[tag] = start + n
			logger := slog.New(nagare.NewSlogHandler(c, tag, nil))
			for i := start; i < start+n; i++ {
				logger.Info(fmt.Sprintf("seq %d", i), "seq", i)
			}
			reply = map[string]any{"logged": n}
		case "close":
			ms, _ := strconv.Atoi(arg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
			t0 := time.Now()
			err := c.CloseContext(ctx)
			cancel()
			reply = map[string]any{"closed": err == nil, "ms": time.Since(t0).Milliseconds()}
		case "stats":
			s := c.Stats()
			// kept: what the spill file holds, fsync'd (after Close, what it keeps)
			reply = map[string]any{
				"sent": s.Sent, "dropped": s.Dropped, "kept": s.SpillPending, "buffered": s.Buffered,
				"connect_failures": refused.Load(),
			}
		case "quit":
			return
		default:
			reply = map[string]any{"error": fmt.Sprintf("unknown command %q", cmd)}
		}
		if err := out.Encode(reply); err != nil {
			return
		}
	}
}
