package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
)

// fakeTB records Fatal calls instead of stopping the test.
type fakeTB struct {
	testing.TB
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatal(args ...any) { f.fatals = append(f.fatals, fmt.Sprint(args...)) }

func TestMust(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{name: "nil", err: nil, want: nil},
		{name: "error", err: errors.New("boom"), want: []string{"boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTB{TB: t}
			Must(f, tc.err)
			if fmt.Sprint(f.fatals) != fmt.Sprint(tc.want) {
				t.Errorf("Fatal calls = %q, want %q", f.fatals, tc.want)
			}
		})
	}
}

func TestPortFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(t *testing.T) int // holds a port until the test ends
		want bool
	}{
		{name: "TCP held", want: false, hold: func(t *testing.T) int {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			Must(t, err)
			t.Cleanup(func() { _ = l.Close() })
			return l.Addr().(*net.TCPAddr).Port
		}},
		{name: "UDP held", want: false, hold: func(t *testing.T) int {
			u, err := net.ListenPacket("udp", "127.0.0.1:0")
			Must(t, err)
			t.Cleanup(func() { _ = u.Close() })
			return u.LocalAddr().(*net.UDPAddr).Port
		}},
		{name: "nothing held", want: true, hold: func(t *testing.T) int { return MustFreePort(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := tc.hold(t)
			if got := portFree(port); got != tc.want {
				t.Errorf("portFree(%d) = %v, want %v", port, got, tc.want)
			}
		})
	}
}

func TestFreePort(t *testing.T) {
	base := blockFirst + (os.Getpid()%blockCount)*blockSize
	seen := map[int]bool{}
	for range 5 {
		port, err := FreePort()
		Must(t, err)
		if port < base || port >= base+blockSize {
			t.Errorf("FreePort() = %d, want a port of this process's block %d-%d", port, base, base+blockSize-1)
		}
		if seen[port] {
			t.Errorf("FreePort() = %d twice", port)
		}
		seen[port] = true
		if !portFree(port) {
			t.Errorf("FreePort() = %d, not free for both TCP and UDP", port)
		}
	}
}

// TestFreePortSkipsTaken: a port of the block that is in use is not handed
// out; the next one is.
func TestFreePortSkipsTaken(t *testing.T) {
	base := blockFirst + (os.Getpid()%blockCount)*blockSize
	taken := base + int((nextPort.Load()+1)%blockSize)
	if l, err := net.Listen("tcp", hostPort(taken)); err == nil { // else someone else holds it
		defer func() { _ = l.Close() }()
	}
	port := MustFreePort(t)
	if port == taken {
		t.Errorf("FreePort() = %d, a port held on TCP", port)
	}
}

func TestMustFreePort(t *testing.T) {
	f := &fakeTB{TB: t}
	if port := MustFreePort(f); port <= 0 || len(f.fatals) != 0 {
		t.Errorf("MustFreePort() = %d with Fatal calls %q, want a port and none", port, f.fatals)
	}
}

// runnerFunc adapts a function to Runner.
type runnerFunc func(context.Context) error

func (f runnerFunc) Start(ctx context.Context) error { return f(ctx) }

// TestRunStopsWithTheTest: Run's runner gets a live context during the
// test and has returned once the test is over.
func TestRunStopsWithTheTest(t *testing.T) {
	var stopped atomic.Bool
	t.Run("inner", func(t *testing.T) {
		ctx := Run(t, runnerFunc(func(ctx context.Context) error {
			<-ctx.Done()
			stopped.Store(true)
			return nil
		}))
		if ctx.Err() != nil || stopped.Load() {
			t.Fatal("the runner stopped before the test ended")
		}
	})
	if !stopped.Load() {
		t.Error("the runner was still running after its test ended")
	}
}

func TestHTTPOK(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tests := []struct {
		url  string
		want bool
	}{
		{srv.URL + "/ready", true},
		{srv.URL + "/other", false},
		{"http://127.0.0.1:1/ready", false},
		{"::not a url", false},
	}
	for _, tt := range tests {
		if got := HTTPOK(t.Context(), tt.url); got != tt.want {
			t.Errorf("HTTPOK(%q) = %t, want %t", tt.url, got, tt.want)
		}
	}
}
