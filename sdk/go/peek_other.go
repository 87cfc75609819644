//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package nagare

import "syscall"

// peekClosed is not available on this platform: a closed peer is noticed
// when a write or an ack read fails.
func peekClosed(sc syscall.Conn) (closed, pending bool, ok bool) {
	return false, false, false
}
