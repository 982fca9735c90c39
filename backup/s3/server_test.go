package s3_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

const (
	testAccessKey = "opkit-test-access"
	testSecretKey = "opkit-test-secret-key-0123456789"
)

// server is a versitygw S3 server on loopback, started once per test binary
// by the first test that needs it and stopped by TestMain.
var server struct {
	once     sync.Once
	err      error
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	waitErr  error
	dir      string
	endpoint string // http://127.0.0.1:port
	host     string // 127.0.0.1:port
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopServer()
	os.Exit(code)
}

// startServer returns the endpoint of the shared server, starting it on
// first use. It fails the test (never skips) when versitygw is missing.
func startServer(t testing.TB) string {
	t.Helper()
	server.once.Do(func() { server.err = launch() })
	if server.err != nil {
		t.Fatalf("S3 test server: %v", server.err)
	}
	return server.endpoint
}

func launch() error {
	bin, err := repo.Tool("versitygw", "versitygw")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "opkit-versitygw-")
	if err != nil {
		return err
	}
	server.dir = dir
	port, err := testkit.FreePort()
	if err != nil {
		return err
	}
	server.host = fmt.Sprintf("127.0.0.1:%d", port)
	server.endpoint = "http://" + server.host
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o750); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--port", server.host, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+testAccessKey, "ROOT_SECRET_KEY="+testSecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	server.cmd = cmd
	server.exited = make(chan struct{})
	go func() {
		server.waitErr = cmd.Wait()
		close(server.exited)
	}()

	client, err := adminClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = client.ListBuckets(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-server.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "versitygw.log"))
			return fmt.Errorf("versitygw exited (%w) before answering:\n%s", server.waitErr, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw at %s did not answer within 30s: %w", server.endpoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func adminClient() (*minio.Client, error) {
	return minio.New(server.host, &minio.Options{
		Creds:        credentials.NewStaticV4(testAccessKey, testSecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
		MaxRetries:   1,
	})
}

func stopServer() {
	if server.cmd != nil {
		_ = server.cmd.Process.Signal(os.Interrupt)
		select {
		case <-server.exited:
		case <-time.After(5 * time.Second):
			_ = server.cmd.Process.Kill()
			<-server.exited
		}
	}
	if server.dir != "" {
		_ = os.RemoveAll(server.dir)
	}
}

var bucketSeq struct {
	sync.Mutex
	n int
}

// newBucket creates a fresh bucket on the shared server and returns its name.
func newBucket(t testing.TB) string {
	t.Helper()
	startServer(t)
	bucketSeq.Lock()
	bucketSeq.n++
	name := fmt.Sprintf("opkit-test-%d", bucketSeq.n)
	bucketSeq.Unlock()
	client, err := adminClient()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
	return name
}
