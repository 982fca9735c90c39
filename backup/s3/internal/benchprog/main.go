//go:build linux

// Command benchprog measures backup throughput and peak memory: it backs up a
// synthetic snapshot (generated in memory, never read from disk) to the
// filesystem store and to the S3 store (a versitygw started on loopback), and
// compares the throughput with a plain io.Copy of the same generator into a
// file, with and without fsync, and with the device's own sequential write
// bandwidth (O_DIRECT, mode disk). Every measurement runs in its own child process so that its peak RSS
// (VmHWM from /proc/self/status) is its own.
//
//	cd backup/s3 && go run ./internal/benchprog -size 1GiB
//
// prints a Markdown table (committed in docs/benchmarks/backup.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/procfs"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/backup/s3"
	"github.com/opkit-dev/opkit/backup/storetest"
	"github.com/opkit-dev/opkit/internal/testkit"
)

const (
	accessKey = "opkit-bench"
	secretKey = "opkit-bench-secret-0123456789"
	bucket    = "opkit-bench"
)

var (
	s3Concurrency uint
	s3PartSize    uint64
)

type result struct {
	Mode    string  `json:"mode"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	HWMKiB  int64   `json:"vmhwmKiB"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchprog:", err)
		os.Exit(1)
	}
}

func run() error {
	sizeFlag := flag.String("size", "1GiB", "snapshot size (bytes, or with KiB/MiB/GiB suffix)")
	dirFlag := flag.String("dir", "", "scratch directory (default: a new directory in $TMPDIR)")
	count := flag.Int("count", 1, "runs per mode; the median is reported")
	warmup := flag.Int("warmup", 1, "unmeasured copy+fsync runs before the measurements")
	modes := flag.String("modes", "copy,copy+fsync,disk,fsstore,s3-put,s3,s3-unsigned", "comma-separated modes")
	child := flag.String("child", "", "internal: run one measurement in this process")
	endpoint := flag.String("endpoint", "", "internal: S3 endpoint for -child s3")
	flag.UintVar(&s3Concurrency, "s3-concurrency", s3.DefaultConcurrency, "parts uploaded in parallel by the S3 store")
	flag.Uint64Var(&s3PartSize, "s3-part-size", s3.DefaultPartSize, "S3 multipart part size in bytes")
	flag.Parse()

	size, err := parseSize(*sizeFlag)
	if err != nil {
		return err
	}
	if *child != "" {
		return measure(*child, size, *dirFlag, *endpoint)
	}

	dir := *dirFlag
	if dir == "" {
		if dir, err = os.MkdirTemp("", "opkit-benchprog-"); err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
	}
	var ep string
	if slices.ContainsFunc(strings.Split(*modes, ","), func(m string) bool { return strings.HasPrefix(m, "s3") }) {
		stop, e, err := startVersitygw(dir)
		if err != nil {
			return err
		}
		defer stop()
		ep = e
	}

	results := map[string][]result{}
	order := strings.Split(*modes, ",")
	// An unmeasured warm-up: on virtual disks the first large write after
	// a pause is often several times slower than the next ones.
	for i := 0; i < *warmup; i++ {
		syscall.Sync()
		if _, err := runChild("copy+fsync", *sizeFlag, dir, ep); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	// The local modes run all their rounds before the S3 ones: an S3 run
	// leaves gigabytes of freed blocks behind (versitygw writes the parts,
	// then the object), and the run after it was measured up to six times
	// slower on a virtual disk.
	var local, remote []string
	for _, m := range order {
		if strings.HasPrefix(m, "s3") {
			remote = append(remote, m)
		} else {
			local = append(local, m)
		}
	}
	var schedule []string
	for _, group := range [][]string{local, remote} {
		for i := 0; i < *count && len(group) > 0; i++ {
			// Rotate the order each round so that no mode always runs
			// first.
			schedule = append(schedule, group[i%len(group):]...)
			schedule = append(schedule, group[:i%len(group)]...)
		}
	}
	for _, mode := range schedule {
		// Flush the previous run's dirty pages so that their writeback
		// does not slow this run down.
		syscall.Sync()
		time.Sleep(2 * time.Second)
		r, err := runChild(mode, *sizeFlag, dir, ep)
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		results[mode] = append(results[mode], r)
		fmt.Fprintf(os.Stderr, "%-11s %6.2fs %8.1f MiB/s  peak RSS %6.1f MiB\n", mode, r.Seconds, mibps(r), float64(r.HWMKiB)/1024)
	}
	report(order, results, size, *count)
	return nil
}

func mibps(r result) float64 { return float64(r.Bytes) / (1 << 20) / r.Seconds }

func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		if a.Seconds < b.Seconds {
			return -1
		}
		if a.Seconds > b.Seconds {
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

func report(order []string, results map[string][]result, size int64, count int) {
	base := map[string]float64{}
	for _, b := range []string{"copy", "copy+fsync", "s3-put"} {
		if rs, ok := results[b]; ok {
			base[b] = mibps(median(rs))
		}
	}
	fmt.Printf("Snapshot size %s, median of %d run(s), %s/%s, %d CPUs, %s.\n\n", formatSize(size), count, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Println("| mode | MiB/s | vs plain io.Copy | vs io.Copy + fsync | vs the SDK's plain PutObject (s3-put) | peak RSS (VmHWM) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, mode := range order {
		r := median(results[mode])
		ratio := func(b string) string {
			if v, ok := base[b]; ok {
				return fmt.Sprintf("%.2fx", mibps(r)/v)
			}
			return "-"
		}
		vsPut := "-"
		if strings.HasPrefix(mode, "s3") {
			vsPut = ratio("s3-put")
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %.1f MiB |\n", mode, mibps(r), ratio("copy"), ratio("copy+fsync"), vsPut, float64(r.HWMKiB)/1024)
	}
}

func runChild(mode, size, dir, endpoint string) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(self, "-child", mode, "-size", size, "-dir", dir, "-endpoint", endpoint,
		"-s3-concurrency", strconv.FormatUint(uint64(s3Concurrency), 10), "-s3-part-size", strconv.FormatUint(s3PartSize, 10))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, err
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		return result{}, fmt.Errorf("child output %q: %w", out, err)
	}
	return r, nil
}

// measure runs one mode in this process and prints a JSON result.
func measure(mode string, size int64, dir, endpoint string) error {
	ctx := context.Background()
	var n int64
	start := time.Now()
	switch mode {
	case "copy", "copy+fsync":
		f, err := os.Create(filepath.Join(dir, "plain.data"))
		if err != nil {
			return err
		}
		if n, err = io.Copy(f, storetest.NewGenerator(size)); err != nil {
			return err
		}
		if mode == "copy+fsync" {
			if err := f.Sync(); err != nil {
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		defer func() { _ = os.Remove(f.Name()) }()
	case "disk":
		path := filepath.Join(dir, "direct.data")
		defer func() { _ = os.Remove(path) }()
		var err error
		if n, err = writeDirect(path, size); err != nil {
			return err
		}
	case "s3-put":
		// The S3 transport's own limit here: the SDK's streaming PutObject
		// of the generator (unsigned payload, the store's part size and
		// concurrency), without backup.Backup's hashing and manifest.
		host := strings.TrimPrefix(endpoint, "http://")
		client, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
		if err != nil {
			return err
		}
		info, err := client.PutObject(ctx, bucket, "plain.data", storetest.NewGenerator(size), -1, minio.PutObjectOptions{
			PartSize: s3PartSize, NumThreads: s3Concurrency, ConcurrentStreamParts: s3Concurrency > 1, DisableContentSha256: true,
		})
		if err != nil {
			return err
		}
		n = info.Size
		defer func() { _ = client.RemoveObject(ctx, bucket, "plain.data", minio.RemoveObjectOptions{}) }()
	case "fsstore", "s3", "s3-unsigned":
		var store backup.Store
		if mode == "fsstore" {
			root := filepath.Join(dir, "fsstore")
			if err := os.MkdirAll(root, 0o750); err != nil {
				return err
			}
			s, err := fsstore.New(root)
			if err != nil {
				return err
			}
			store = s
			defer func() { _ = os.RemoveAll(root) }()
		} else {
			opts := []s3.Option{s3.WithConcurrency(s3Concurrency), s3.WithPartSize(s3PartSize)}
			if mode == "s3-unsigned" {
				opts = append(opts, s3.WithUnsignedPayload())
			}
			s, err := s3.New(s3.Config{Endpoint: endpoint, Bucket: bucket, AccessKeyID: accessKey, SecretAccessKey: secretKey, Region: "us-east-1", PathStyle: true}, opts...)
			if err != nil {
				return err
			}
			store = s
		}
		m, err := backup.Backup(ctx, store, backup.SnapshotterFunc(func(ctx context.Context, w io.Writer) (backup.Metadata, error) {
			_, err := storetest.NewGenerator(size).WriteTo(w)
			return backup.Metadata{Engine: "synthetic"}, err
		}))
		if err != nil {
			return err
		}
		n = m.Size
		defer func() {
			_ = store.Delete(ctx, backup.ManifestKeyFor(m.ID))
			_ = store.Delete(ctx, m.DataKey)
		}()
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	elapsed := time.Since(start)
	if n != size {
		return fmt.Errorf("wrote %d bytes, want %d", n, size)
	}
	hwm, err := vmHWM()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(result{Mode: mode, Bytes: n, Seconds: elapsed.Seconds(), HWMKiB: hwm})
}

func vmHWM() (int64, error) {
	p, err := procfs.Self()
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	return int64(st.VmHWM >> 10), nil
}

func parseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > math.MaxInt64 {
		return 0, fmt.Errorf("-size %q: want a positive size such as 1GiB or 512MiB", s)
	}
	return int64(n), nil
}

func formatSize(n int64) string { return humanize.IBytes(uint64(n)) }

// startVersitygw starts versitygw on a free loopback port with a fresh
// bucket and returns a function that stops it.
func startVersitygw(dir string) (stop func(), endpoint string, err error) {
	bin, err := findBin("versitygw")
	if err != nil {
		return nil, "", err
	}
	port, err := testkit.FreePort()
	if err != nil {
		return nil, "", err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	data := filepath.Join(dir, "versitygw")
	if err := os.MkdirAll(data, 0o750); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "--port", host, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+accessKey, "ROOT_SECRET_KEY="+secretKey)
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	client, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), BucketLookup: minio.BucketLookupPath, Region: "us-east-1", MaxRetries: 1})
	if err != nil {
		stop()
		return nil, "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		cancel()
		if err == nil {
			return stop, "http://" + host, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", fmt.Errorf("versitygw at %s: %w", host, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// findBin returns $OPKIT_BIN/name or <module root>/bin/name.
func findBin(name string) (string, error) {
	dir := os.Getenv("OPKIT_BIN")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = filepath.Join(d, "bin")
				break
			}
			if filepath.Dir(d) == d {
				return "", errors.New("go.mod not found above the working directory; set OPKIT_BIN")
			}
		}
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found (%w): run `make %s`", p, err, name)
	}
	return p, nil
}
