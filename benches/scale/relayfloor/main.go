// relayfloor: the floor for a forward relay, the unavoidable work and nothing
// else. Per connection it reads Forward frames, checks each one (msgpack
// well-formed: [tag, entries, options?]; in packed mode every entry
// [time, map] walked), and writes the frame on, unchanged, to its own
// upstream connection; bytes coming back (acks) are piped to the sender.
// No buffer, no chunks, no batching across connections: GOMAXPROCS (-threads)
// bounds the threads. nagare's events/s and events per CPU-second against
// this program say what nagare's own design costs (benches/scale.sh).
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"runtime"
)

var errBad = errors.New("malformed msgpack")

// skip returns the position after the msgpack value at p.
func skip(b []byte, p int) (int, error) {
	if p >= len(b) {
		return 0, errBad
	}
	c := b[p]
	p++
	n := 0
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return p, nil
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
		return bound(b, p+n)
	case c >= 0x90 && c <= 0x9f:
		return skipN(b, p, int(c&0x0f))
	case c >= 0x80 && c <= 0x8f:
		return skipN(b, p, 2*int(c&0x0f))
	}
	switch c {
	case 0xcc, 0xd0:
		return bound(b, p+1)
	case 0xcd, 0xd1:
		return bound(b, p+2)
	case 0xca, 0xce, 0xd2:
		return bound(b, p+4)
	case 0xcb, 0xcf, 0xd3:
		return bound(b, p+8)
	case 0xd4:
		return bound(b, p+2)
	case 0xd5:
		return bound(b, p+3)
	case 0xd6:
		return bound(b, p+5)
	case 0xd7:
		return bound(b, p+9)
	case 0xd8:
		return bound(b, p+17)
	case 0xc4, 0xd9:
		if p+1 > len(b) {
			return 0, errBad
		}
		return bound(b, p+1+int(b[p]))
	case 0xc5, 0xda:
		if p+2 > len(b) {
			return 0, errBad
		}
		return bound(b, p+2+int(binary.BigEndian.Uint16(b[p:])))
	case 0xc6, 0xdb:
		if p+4 > len(b) {
			return 0, errBad
		}
		return bound(b, p+4+int(binary.BigEndian.Uint32(b[p:])))
	case 0xc7:
		if p+1 > len(b) {
			return 0, errBad
		}
		return bound(b, p+2+int(b[p]))
	case 0xc8:
		if p+2 > len(b) {
			return 0, errBad
		}
		return bound(b, p+3+int(binary.BigEndian.Uint16(b[p:])))
	case 0xc9:
		if p+4 > len(b) {
			return 0, errBad
		}
		return bound(b, p+5+int(binary.BigEndian.Uint32(b[p:])))
	case 0xdc, 0xde:
		if p+2 > len(b) {
			return 0, errBad
		}
		n = int(binary.BigEndian.Uint16(b[p:]))
		if c == 0xde {
			n *= 2
		}
		return skipN(b, p+2, n)
	case 0xdd, 0xdf:
		if p+4 > len(b) {
			return 0, errBad
		}
		n = int(binary.BigEndian.Uint32(b[p:]))
		if c == 0xdf {
			n *= 2
		}
		return skipN(b, p+4, n)
	}
	return 0, errBad
}

func bound(b []byte, p int) (int, error) {
	if p > len(b) {
		return 0, errBad
	}
	return p, nil
}

func skipN(b []byte, p, n int) (int, error) {
	var err error
	for i := 0; i < n; i++ {
		if p, err = skip(b, p); err != nil {
			return 0, err
		}
	}
	return p, nil
}

// header reads a str/bin header at p: payload start and end.
func strbin(b []byte, p int) (int, int, bool) {
	if p >= len(b) {
		return 0, 0, false
	}
	c := b[p]
	var n, h int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n, h = int(c&0x1f), 1
	case (c == 0xc4 || c == 0xd9) && p+1 < len(b):
		n, h = int(b[p+1]), 2
	case (c == 0xc5 || c == 0xda) && p+2 < len(b):
		n, h = int(binary.BigEndian.Uint16(b[p+1:])), 3
	case (c == 0xc6 || c == 0xdb) && p+4 < len(b):
		n, h = int(binary.BigEndian.Uint32(b[p+1:])), 5
	default:
		return 0, 0, false
	}
	return p + h, p + h + n, true
}

// check validates a whole frame: [tag, entries, options?]. Packed entries
// (bin/str) are walked entry by entry, each an array [time, map].
func check(f []byte) error {
	if len(f) == 0 || f[0] < 0x92 || f[0] > 0x94 {
		return errBad
	}
	p, err := skip(f, 1) // tag
	if err != nil {
		return err
	}
	if s, e, ok := strbin(f, p); ok && e <= len(f) {
		for q := s; q < e; {
			if f[q] != 0x92 {
				return errBad
			}
			if q, err = skipN(f[:e], q+1, 2); err != nil {
				return err
			}
		}
	}
	_, err = skipN(f, p, int(f[0]&0x0f)-1)
	return err
}

// frameLen returns the length of the complete frame at the start of b, or 0
// when more bytes are needed.
func frameLen(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := skip(b, 0)
	if err == errBad && b[0] >= 0x92 && b[0] <= 0x94 && len(b) < 64<<20 {
		return 0, nil // most likely incomplete; check() decides once complete
	}
	return n, err
}

func relay(c net.Conn, to string) {
	defer c.Close()
	u, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { io.Copy(c, u) }()
	r := bufio.NewReaderSize(c, 1<<20)
	buf := make([]byte, 0, 1<<20)
	for {
		// Read until the buffer holds at least one complete frame.
		n, err := frameLen(buf)
		for n == 0 {
			if len(buf) == cap(buf) {
				nb := make([]byte, len(buf), 2*cap(buf))
				copy(nb, buf)
				buf = nb
			}
			m, rerr := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if rerr != nil {
				return
			}
			if n, err = frameLen(buf); err != nil {
				log.Printf("%s: %v", c.RemoteAddr(), err)
				return
			}
		}
		// Write every complete frame in the buffer at once.
		end := 0
		for n > 0 {
			if err := check(buf[end : end+n]); err != nil {
				log.Printf("%s: %v", c.RemoteAddr(), err)
				return
			}
			end += n
			if n, err = frameLen(buf[end:]); err != nil {
				log.Printf("%s: %v", c.RemoteAddr(), err)
				return
			}
		}
		if _, err := u.Write(buf[:end]); err != nil {
			return
		}
		rest := copy(buf, buf[end:])
		buf = buf[:rest]
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	to := flag.String("to", "", "upstream address")
	threads := flag.Int("threads", runtime.NumCPU(), "threads running Go code (GOMAXPROCS)")
	flag.Parse()
	runtime.GOMAXPROCS(*threads)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relay(c, *to)
	}
}
