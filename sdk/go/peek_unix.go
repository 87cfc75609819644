//go:build linux || darwin || freebsd || netbsd || openbsd

package nagare

import (
	"errors"
	"syscall"
)

// peekClosed asks the kernel, without blocking and without consuming data,
// whether the peer has closed the connection (FIN or RST). pending reports
// that unread bytes are waiting.
func peekClosed(sc syscall.Conn) (closed, pending bool, ok bool) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false, false
	}
	var buf [1]byte
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	if err != nil {
		return true, false, true
	}
	if rerr != nil {
		if errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) || errors.Is(rerr, syscall.EINTR) {
			return false, false, true
		}
		return true, false, true
	}
	if n == 0 {
		return true, false, true
	}
	return false, true, true
}
