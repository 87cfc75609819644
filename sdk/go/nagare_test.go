package nagare

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nagareBin is $NAGARE_BIN or target/release/nagare at the repo root. The
// tests against the real daemon fail (they do not skip) when it is missing.
func nagareBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("NAGARE_BIN")
	if bin == "" {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "target", "release", "nagare")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("nagare binary not found at %s (build it with `cargo build --release` at the repo root, or set NAGARE_BIN): %v", bin, err)
	}
	return bin
}

type nagareProc struct {
	cmd   *exec.Cmd
	lines chan string
}

// startNagare runs `nagare run -c` with a forward input (inputConf is the
// body of [[input]] after type) and a stdout output.
func startNagare(t *testing.T, inputConf string) *nagareProc {
	t.Helper()
	bin := nagareBin(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nagare.toml")
	conf := fmt.Sprintf("[[input]]\ntype = \"forward\"\n%s\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n", inputConf)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", cfg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &nagareProc{cmd: cmd, lines: make(chan string, 1<<16)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return p
}

func waitListening(t *testing.T, network, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nagare does not listen on %s %s: %v", network, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// collect reads n JSON lines for tag and checks seq 0..n-1 each arrived
// exactly once.
func (p *nagareProc) collect(t *testing.T, tag string, n int) {
	t.Helper()
	seen := make([]bool, n)
	got := 0
	timeout := time.After(30 * time.Second)
	for got < n {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("nagare exited after %d of %d events", got, n)
			}
			var ev struct {
				Time   string         `json:"time"`
				Tag    string         `json:"tag"`
				Record map[string]any `json:"record"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			if ev.Tag != tag {
				continue
			}
			if _, err := time.Parse(time.RFC3339Nano, ev.Time); err != nil {
				t.Fatalf("bad time in %q: %v", line, err)
			}
			f, ok := ev.Record["seq"].(float64)
			seq := int(f)
			if !ok || seq < 0 || seq >= n || seen[seq] {
				t.Fatalf("unexpected or duplicate seq in %q", line)
			}
			seen[seq] = true
			got++
		case <-timeout:
			t.Fatalf("got %d of %d events from nagare", got, n)
		}
	}
}

func TestAgainstNagareBinary(t *testing.T) {
	const n = 2000
	t.Run("tcp", func(t *testing.T) {
		addr := freeAddr(t)
		p := startNagare(t, fmt.Sprintf("bind = %q", addr))
		waitListening(t, "tcp", addr)
		c := newClient(t, Config{Servers: []Server{{Address: addr}}, ChunkSize: 8 << 10})
		emitN(t, c, "go.sdk", 0, n)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		p.collect(t, "go.sdk", n)
	})
	t.Run("time.Time as an RFC 3339 string", func(t *testing.T) {
		addr := freeAddr(t)
		p := startNagare(t, fmt.Sprintf("bind = %q", addr))
		waitListening(t, "tcp", addr)
		c := newClient(t, Config{Servers: []Server{{Address: addr}}})
		at := time.Date(2026, 11, 24, 9, 30, 15, 250_000_000, time.UTC)
		if err := c.Emit("go.sdk.time", map[string]any{"at": at, "big": uint64(1<<63 + 1)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case line := <-p.lines:
			want := `"record":{"at":"2026-11-24T09:30:15.250Z","big":9223372036854775809}`
			if !strings.Contains(line, want) {
				t.Fatalf("got %s, want it to hold %s", line, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no event from nagare")
		}
	})
	t.Run("unix-shared-key-ack", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "ngo")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		sock := filepath.Join(dir, "n.sock")
		p := startNagare(t, fmt.Sprintf("path = %q\nshared_key = \"go-secret\"", sock))
		waitListening(t, "unix", sock)
		c := newClient(t, Config{
			Servers: []Server{{Network: "unix", Address: sock}}, SharedKey: "go-secret",
			RequireAck: true, ChunkSize: 8 << 10,
		})
		emitN(t, c, "go.sdk.ack", 0, n)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Sent != n {
			t.Fatalf("stats %+v", st)
		}
		p.collect(t, "go.sdk.ack", n)
	})
}
