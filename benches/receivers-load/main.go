// receivers-load replays pre-built requests to nagare's receivers for
// benches/receivers.sh, over keep-alive connections, until -duration:
//
//	-mode es:    POST /_bulk with one NDJSON body of -events documents
//	-mode beats: Lumberjack v2 windows of -events JSON frames, zlib-
//	             compressed as Filebeat sends them; each waits for its ACK
//
// Every event is {"seq":N,"message":"xxx…"} of about -size bytes, as
// flowbench's forward relay sends. The bodies are built once, so the
// load program's own CPU stays small. Prints one JSON line: requests,
// failed (non-2xx or no ACK), events (in requests answered 2xx / ACKed),
// seconds.
package main

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func doc(i, size int) string {
	head := fmt.Sprintf(`{"seq":%d,"message":"`, i)
	n := size - len(head) - 2
	if n < 1 {
		n = 1
	}
	return head + strings.Repeat("x", n) + `"}`
}

func esBody(events, size int) []byte {
	var b bytes.Buffer
	for i := 0; i < events; i++ {
		b.WriteString(`{"create":{"_index":"bench"}}` + "\n")
		b.WriteString(doc(i, size) + "\n")
	}
	return b.Bytes()
}

func beatsWindow(events, size int) []byte {
	var frames bytes.Buffer
	for i := 0; i < events; i++ {
		d := doc(i, size)
		frames.WriteString("2J")
		binary.Write(&frames, binary.BigEndian, uint32(i+1))
		binary.Write(&frames, binary.BigEndian, uint32(len(d)))
		frames.WriteString(d)
	}
	var z bytes.Buffer
	w, _ := zlib.NewWriterLevel(&z, 3)
	w.Write(frames.Bytes())
	w.Close()
	var out bytes.Buffer
	out.WriteString("2W")
	binary.Write(&out, binary.BigEndian, uint32(events))
	out.WriteString("2C")
	binary.Write(&out, binary.BigEndian, uint32(z.Len()))
	out.Write(z.Bytes())
	return out.Bytes()
}

func main() {
	mode := flag.String("mode", "es", "es or beats")
	addr := flag.String("addr", "127.0.0.1:9200", "nagare's receiver")
	events := flag.Int("events", 1000, "events per request or window")
	size := flag.Int("size", 100, "bytes per event")
	conns := flag.Int("conns", 8, "connections")
	duration := flag.Duration("duration", 10*time.Second, "how long")
	flag.Parse()

	var requests, failed, done atomic.Int64
	deadline := time.Now().Add(*duration)
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if *mode == "es" {
				body := esBody(*events, *size)
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
				for time.Now().Before(deadline) {
					resp, err := client.Post("http://"+*addr+"/_bulk", "application/x-ndjson", bytes.NewReader(body))
					requests.Add(1)
					if err != nil {
						failed.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 == 2 {
						done.Add(int64(*events))
					} else {
						failed.Add(1)
					}
				}
				return
			}
			window := beatsWindow(*events, *size)
			conn, err := net.Dial("tcp", *addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer conn.Close()
			r := bufio.NewReader(conn)
			var ack [6]byte
			for time.Now().Before(deadline) {
				requests.Add(1)
				if _, err := conn.Write(window); err != nil {
					failed.Add(1)
					return
				}
				for {
					if _, err := io.ReadFull(r, ack[:]); err != nil {
						failed.Add(1)
						return
					}
					if binary.BigEndian.Uint32(ack[2:]) == uint32(*events) {
						break
					}
				}
				done.Add(int64(*events))
			}
		}()
	}
	wg.Wait()
	out, _ := json.Marshal(map[string]any{
		"requests": requests.Load(), "failed": failed.Load(), "events": done.Load(),
		"seconds": time.Since(start).Seconds(),
	})
	fmt.Println(string(out))
}
