//go:build linux

package fsstore

import (
	"errors"
	"os"
	"syscall"
)

// directIOSupported reports whether this platform can write with O_DIRECT.
const directIOSupported = true

// setDirect turns O_DIRECT on or off for f's open file description.
func setDirect(f *os.File, on bool) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	err = rc.Control(func(fd uintptr) {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if errno != 0 {
			opErr = errno
			return
		}
		if on {
			flags |= syscall.O_DIRECT
		} else {
			flags &^= syscall.O_DIRECT
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, flags); errno != 0 {
			opErr = errno
		}
	})
	if err != nil {
		return err
	}
	return opErr
}

// isDirectUnsupported reports whether err is how a filesystem refuses
// O_DIRECT (at fcntl time or on the first write).
func isDirectUnsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP)
}
