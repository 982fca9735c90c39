// Command toolbox is the client program of opkit's e2e suites on real
// nodes: the image opkit.dev/toolbox (make images) runs it, and suites
// exec its subcommands in a pod to see the cluster as a workload does.
//
//	toolbox sleep                        print "toolbox ready" and wait for SIGTERM
//	toolbox memcached ADDR KEY VALUE     memcached set KEY=VALUE, then get it back
//	toolbox lookup NAME                  resolve NAME with the pod's resolver
//	toolbox write FILE TEXT              write TEXT to FILE (parents created)
//	toolbox cat FILE                     print FILE
//	toolbox ls DIR                       print the names in DIR, one per line
//	toolbox sha256 FILE                  print FILE's hex SHA-256 and size in bytes
//	toolbox https-get URL [TOKENFILE]    GET URL (bearer token from TOKENFILE), print "HTTP <code>" and the body
//
// Each exits non-zero with a message on stderr when the step fails.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "toolbox:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: toolbox sleep | memcached ADDR KEY VALUE | lookup NAME | write FILE TEXT | cat FILE | ls DIR | sha256 FILE | https-get URL [TOKENFILE]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "sleep" && len(rest) == 0:
		fmt.Println("toolbox ready")
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		return nil
	case cmd == "memcached" && len(rest) == 3:
		got, err := memcachedSetGet(ctx, rest[0], rest[1], rest[2])
		if err != nil {
			return err
		}
		fmt.Println(got)
		return nil
	case cmd == "lookup" && len(rest) == 1:
		addrs, err := net.DefaultResolver.LookupHost(ctx, rest[0])
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(addrs, " "))
		return nil
	case cmd == "write" && len(rest) == 2:
		if err := os.MkdirAll(filepath.Dir(rest[0]), 0o755); err != nil {
			return err
		}
		return os.WriteFile(rest[0], []byte(rest[1]), 0o644)
	case cmd == "cat" && len(rest) == 1:
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	case cmd == "ls" && len(rest) == 1:
		entries, err := os.ReadDir(rest[0])
		if err != nil {
			return err
		}
		for _, e := range entries {
			fmt.Println(e.Name())
		}
		return nil
	case cmd == "sha256" && len(rest) == 1:
		sum, n, err := sha256File(rest[0])
		if err != nil {
			return err
		}
		fmt.Println(sum, n)
		return nil
	case cmd == "https-get" && (len(rest) == 1 || len(rest) == 2):
		token := ""
		if len(rest) == 2 {
			b, err := os.ReadFile(rest[1])
			if err != nil {
				return err
			}
			token = strings.TrimSpace(string(b))
		}
		return httpsGet(ctx, rest[0], token)
	default:
		return fmt.Errorf("unknown command or wrong arguments: %q", args)
	}
}

// memcachedSetGet stores value under key with memcached's text protocol,
// reads it back and returns what the server returned.
func memcachedSetGet(ctx context.Context, addr, key, value string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	r := bufio.NewReader(conn)
	if _, err := fmt.Fprintf(conn, "set %s 0 0 %d\r\n%s\r\n", key, len(value), value); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("set: %w", err)
	}
	if strings.TrimSpace(line) != "STORED" {
		return "", fmt.Errorf("set: server answered %q", strings.TrimSpace(line))
	}
	if _, err := fmt.Fprintf(conn, "get %s\r\n", key); err != nil {
		return "", err
	}
	header, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("get: %w", err)
	}
	if !strings.HasPrefix(header, "VALUE "+key+" ") {
		return "", fmt.Errorf("get: server answered %q", strings.TrimSpace(header))
	}
	data, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("get: %w", err)
	}
	return strings.TrimSpace(data), nil
}

// httpsGet gets url with an optional bearer token and prints the status
// code and the body; an HTTP error status is data, not a failure. The
// server's certificate is not verified: the operators' metrics endpoints
// serve a self-signed one, and what the suites check is who may read them.
func httpsGet(ctx context.Context, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see the doc comment
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Printf("HTTP %d\n", resp.StatusCode)
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}

// sha256File returns the hex SHA-256 of the file and its size.
func sha256File(name string) (sum string, size int64, err error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
