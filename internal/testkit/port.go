package testkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
)

// The block of ports FreePort picks from first: blockCount blocks of
// blockSize ports from blockFirst up, all below Linux's default ephemeral
// range (32768-60999).
const blockFirst, blockCount, blockSize = 20000, 60, 200

// ephemeralTries is how many ":0" ports FreePort tries when every port of
// its block is taken.
const ephemeralTries = 20

// nextPort is the last offset in its block that FreePort tried in this
// process.
var nextPort atomic.Int64

// FreePort returns a port that is free on 127.0.0.1 for both TCP and UDP at
// the time of the call, and unlikely to be taken before the caller binds it.
//
// Ports come first from a block below the kernel's ephemeral range, where
// ":0" listeners and outgoing connections get their ports: a port picked
// with ":0" and released can be handed to another process (envtest's etcd,
// a client connection) before the caller binds it, which made servers fail
// to start with "address already in use". Each process uses its own block
// of 200 ports, chosen from its PID, and hands them out in turn, checking
// that each is free. Only when the whole block is taken does FreePort fall
// back to ports the kernel picks (":0"), still checked for UDP too.
//
// The port is not held: a caller that must not lose it holds a listener
// instead.
func FreePort() (int, error) {
	base := blockFirst + (os.Getpid()%blockCount)*blockSize
	for range blockSize {
		port := base + int(nextPort.Add(1)%blockSize)
		if portFree(port) {
			return port, nil
		}
	}
	var lastErr error
	for range ephemeralTries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("picking a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", hostPort(port))
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return port, nil
		}
		lastErr = err
	}
	return 0, errors.Join(fmt.Errorf("no port free for both TCP and UDP on 127.0.0.1 in %d-%d or among %d kernel-picked ports",
		base, base+blockSize-1, ephemeralTries), lastErr)
}

// MustFreePort returns FreePort's port, failing t if there is none.
func MustFreePort(t testing.TB) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// portFree reports whether port can be bound on 127.0.0.1 for both TCP and
// UDP now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", hostPort(port))
	if err != nil {
		return false
	}
	defer func() { _ = l.Close() }()
	u, err := net.ListenPacket("udp", hostPort(port))
	if err != nil {
		return false
	}
	_ = u.Close()
	return true
}

// hostPort is 127.0.0.1:port.
func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
