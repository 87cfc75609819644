// A Lumberjack v2 sender that is not nagare's code: elastic/go-lumber's
// client (the one Beats' output.logstash is built on), for
// tests/it/receivers.rs. It sends N events in windows of W and prints a
// line "acked <total>" after each window the server acknowledged.
//
//	lumber -addr 127.0.0.1:5044 -n 1000 -window 100 -compress 3 [-ca ca.pem]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	v2 "github.com/elastic/go-lumber/client/v2"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5044", "server")
	n := flag.Int("n", 100, "events")
	window := flag.Int("window", 10, "events per window")
	compress := flag.Int("compress", 0, "zlib level (0: uncompressed)")
	ca := flag.String("ca", "", "CA file: TLS")
	start := flag.Int("start", 0, "first seq")
	flag.Parse()

	opts := []v2.Option{v2.Timeout(30 * time.Second), v2.CompressionLevel(*compress)}
	dial := net.Dial
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			fail(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		conf := &tls.Config{RootCAs: pool, ServerName: "localhost"}
		dial = func(network, address string) (net.Conn, error) {
			return tls.Dial(network, address, conf)
		}
	}
	c, err := v2.SyncDialWith(dial, *addr, opts...)
	if err != nil {
		fail(err)
	}
	defer c.Close()
	acked := 0
	for i := *start; i < *start+*n; i += *window {
		var batch []interface{}
		for j := i; j < i+*window && j < *start+*n; j++ {
			batch = append(batch, map[string]interface{}{
				"@timestamp": time.Unix(1714557600+int64(j%60), 0).UTC().Format(time.RFC3339Nano),
				"@metadata":  map[string]interface{}{"beat": "filebeat", "type": "_doc", "version": "8.17.0"},
				"message":    fmt.Sprintf("line %d", j),
				"seq":        j,
				"host":       map[string]interface{}{"name": "web-1"},
			})
		}
		got, err := c.Send(batch)
		if err != nil {
			fail(err)
		}
		if got != len(batch) {
			fail(fmt.Errorf("acked %d of %d", got, len(batch)))
		}
		acked += got
		fmt.Printf("acked %d\n", acked)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lumber:", err)
	os.Exit(1)
}
