package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/opkit-dev/opkit/backup/s3"
	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

const (
	s3AccessKey = "etcd-example-access"
	s3SecretKey = "etcd-example-secret-0123456789"
)

// StartS3 starts versitygw (bin/versitygw, built by `make versitygw`) on
// loopback with a fresh bucket and returns the configuration of an S3 store
// on it. The server is stopped by t.Cleanup.
func StartS3(t testing.TB, bucket string) s3.Config {
	t.Helper()
	bin, err := repo.Tool("versitygw", "versitygw")
	if err != nil {
		t.Fatalf("S3 test server: %v", err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o750); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("127.0.0.1:%d", testkit.MustFreePort(t))
	cmd := exec.Command(bin, "--port", host, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s3AccessKey, "ROOT_SECRET_KEY="+s3SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting versitygw: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	mc, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(s3AccessKey, s3SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err = mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"})
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("versitygw exited before answering:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw at %s did not create bucket %s within 30s: %v", host, bucket, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s3.Config{
		Endpoint: "http://" + host, Bucket: bucket, AccessKeyID: s3AccessKey, SecretAccessKey: s3SecretKey,
		Region: "us-east-1", PathStyle: true,
	}
}
