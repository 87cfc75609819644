// pipe: a TCP byte pipe with read/write (no splice) (like socat -b 262144 TCP-LISTEN:...,fork TCP:...): one goroutine pair per connection.
package main

import (
	"flag"
	"io"
	"log"
	"net"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	to := flag.String("to", "", "upstream address")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func(c net.Conn) {
			u, err := net.Dial("tcp", *to)
			if err != nil {
				c.Close()
				return
			}
			buf1 := make([]byte, 262144)
			buf2 := make([]byte, 262144)
			go func() {
				io.CopyBuffer(struct{ io.Writer }{u}, struct{ io.Reader }{c}, buf1)
				u.(*net.TCPConn).CloseWrite()
			}()
			io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{u}, buf2)
			c.Close()
		}(c)
	}
}
