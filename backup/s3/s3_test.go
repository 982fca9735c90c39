package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/s3"
	"github.com/opkit-dev/opkit/backup/storetest"
	"github.com/opkit-dev/opkit/internal/testkit"
)

func config(bucket, prefix string) s3.Config {
	return s3.Config{
		Endpoint:        server.endpoint,
		Bucket:          bucket,
		Prefix:          prefix,
		AccessKeyID:     testAccessKey,
		SecretAccessKey: testSecretKey,
		Region:          "us-east-1",
		PathStyle:       true,
	}
}

func newStore(t testing.TB, prefix string, opts ...s3.Option) *s3.Store {
	t.Helper()
	bucket := newBucket(t)
	s, err := s3.New(config(bucket, prefix), opts...)
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		opts         []s3.Option
	}{
		{name: "no prefix"},
		{name: "prefix", prefix: "team/db"},
		// Unsigned payloads take another path in the SDK and the server
		// (no streaming signature); the store must behave the same.
		{name: "unsigned payload", prefix: "u", opts: []s3.Option{s3.WithUnsignedPayload()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) backup.Store { return newStore(t, tc.prefix, tc.opts...) },
				storetest.Options{LargeSize: s3.DefaultPartSize*2 + 12345})
		})
	}
}

func TestPrefixIsolation(t *testing.T) {
	bucket := newBucket(t)
	a, err := s3.New(config(bucket, "a"))
	if err != nil {
		t.Fatal(err)
	}
	cb := config(bucket, "/b/")
	cb.Region = "" // discovered from the bucket
	b, err := s3.New(cb)
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustPut(t, a, "x.data", []byte("a"))
	storetest.MustPut(t, b, "x.data", []byte("b"))
	if diff := cmp.Diff([]string{"x.data"}, storetest.Keys(t, a, "")); diff != "" {
		t.Errorf("keys of a (-want +got):\n%s", diff)
	}
	if got := string(storetest.MustGet(t, b, "x.data")); got != "b" {
		t.Errorf("b x.data = %q, want b", got)
	}
	client, err := adminClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.StatObject(t.Context(), bucket, "b/x.data", minio.StatObjectOptions{}); err != nil {
		t.Errorf("object b/x.data not at the expected key: %v", err)
	}
}

// snap writes size pattern bytes, calling hook after every 1 MiB.
func snap(size int64, hook func(written int64) error) backup.Snapshotter {
	data := storetest.Pattern(size)
	return backup.SnapshotterFunc(func(ctx context.Context, w io.Writer) (backup.Metadata, error) {
		var written int64
		for written < size {
			n := min(int64(1<<20), size-written)
			if _, err := w.Write(data[written : written+n]); err != nil {
				return backup.Metadata{}, err
			}
			written += n
			if hook != nil {
				if err := hook(written); err != nil {
					return backup.Metadata{}, err
				}
			}
		}
		return backup.Metadata{Engine: "testdb", ConsistencyPoint: fmt.Sprint(size)}, nil
	})
}

type bufRestorer struct {
	staged, live []byte
	aborted      bool
}

func (r *bufRestorer) Stage(ctx context.Context, rd io.Reader, m backup.Manifest) error {
	var err error
	r.staged, err = io.ReadAll(rd)
	return err
}

func (r *bufRestorer) Commit(ctx context.Context, m backup.Manifest) error {
	r.live = r.staged
	return nil
}

func (r *bufRestorer) Abort(ctx context.Context, m backup.Manifest) error {
	r.aborted = true
	return nil
}

func TestBackupRestore(t *testing.T) {
	store := newStore(t, "ns/db")
	size := int64(s3.DefaultPartSize + 5<<20)
	m, err := backup.Backup(t.Context(), store, snap(size, nil))
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	list, err := backup.List(t.Context(), store)
	if err != nil || len(list) != 1 || list[0].ID != m.ID || list[0].Size != size {
		t.Fatalf("List = %+v, %v; want the one backup of %d bytes", list, err, size)
	}
	r := &bufRestorer{}
	if _, err := backup.Restore(t.Context(), store, m.ID, r); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if !bytes.Equal(r.live, storetest.Pattern(size)) {
		t.Errorf("restored %d bytes that differ from the backup", len(r.live))
	}

	// Corrupt the object in the bucket: same size, one byte different.
	bad := storetest.Pattern(size)
	bad[size-1] ^= 0xff
	storetest.MustPut(t, store, m.DataKey, bad)
	r = &bufRestorer{}
	_, err = backup.Restore(t.Context(), store, m.ID, r)
	var verr *backup.VerificationError
	if !errors.As(err, &verr) || !errors.Is(err, backup.ErrChecksumMismatch) {
		t.Fatalf("Restore of a corrupted object = %v, want a *VerificationError for the checksum", err)
	}
	if r.live != nil || !r.aborted {
		t.Errorf("restorer live=%d bytes aborted=%v; want nothing live and aborted", len(r.live), r.aborted)
	}
}

func TestFailedBackupLeavesNothing(t *testing.T) {
	size := int64(3 * s3.DefaultPartSize)
	for _, tc := range []struct {
		name   string
		wantIs error
		run    func(t *testing.T, store backup.Store) error
	}{
		{"writer killed mid-upload", nil, func(t *testing.T, store backup.Store) error {
			_, err := backup.Backup(t.Context(), store, snap(size, func(written int64) error {
				if written == s3.DefaultPartSize+(1<<20) {
					return errors.New("killed")
				}
				return nil
			}))
			return err
		}},
		{"context cancelled mid-upload", context.Canceled, func(t *testing.T, store backup.Store) error {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			_, err := backup.Backup(ctx, store, snap(size, func(written int64) error {
				if written == s3.DefaultPartSize+(1<<20) {
					cancel()
				}
				return nil
			}))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t, "p")
			err := tc.run(t, store)
			if err == nil {
				t.Fatal("Backup succeeded, want an error")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Backup error = %v, want %v", err, tc.wantIs)
			}
			if keys := storetest.Keys(t, store, ""); len(keys) != 0 {
				t.Errorf("bucket holds %v after a failed backup, want nothing", keys)
			}
			list, err := backup.List(t.Context(), store)
			if err != nil || len(list) != 0 {
				t.Errorf("List = %v, %v; want nothing", list, err)
			}
			// Aborted uploads leave no unfinished multipart upload either.
			n, err := store.CleanIncomplete(t.Context(), "", time.Now().Add(time.Hour))
			if err != nil || n != 0 {
				t.Errorf("CleanIncomplete = %d, %v; want 0 unfinished uploads left", n, err)
			}
		})
	}
}

func TestCleanIncompleteAbortsDeadUploads(t *testing.T) {
	store := newStore(t, "p")
	bucket, _, _ := strings.Cut(strings.TrimPrefix(store.String(), "s3://"), "/")
	client, err := adminClient()
	if err != nil {
		t.Fatal(err)
	}
	// A process that died mid-upload leaves an unfinished multipart upload.
	core := minio.Core{Client: client}
	if _, err := core.NewMultipartUpload(t.Context(), bucket, "p/20260301T000000Z-0000dead.data", minio.PutObjectOptions{}); err != nil {
		t.Fatalf("NewMultipartUpload: %v", err)
	}
	if n, err := store.CleanIncomplete(t.Context(), "", time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("CleanIncomplete within grace = %d, %v; want 0", n, err)
	}
	res, err := backup.Prune(t.Context(), store, backup.Policy{KeepLast: 1, IncompleteGrace: time.Minute}, time.Now().Add(time.Hour))
	if err != nil || res.CleanedUploads != 1 {
		t.Errorf("Prune = %+v, %v; want 1 unfinished upload cleaned", res, err)
	}
}

func TestUnreachable(t *testing.T) {
	port := testkit.MustFreePort(t)
	cfg := s3.Config{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Bucket: "nowhere",
		AccessKeyID: "a", SecretAccessKey: "b", Region: "us-east-1", PathStyle: true,
	}
	store, err := s3.New(cfg, s3.WithMaxRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	checks := map[string]error{}
	checks["Check"] = store.Check(ctx)
	_, checks["List"] = backup.List(ctx, store)
	_, checks["Backup"] = backup.Backup(ctx, store, snap(10, nil))
	_, checks["Restore"] = backup.Restore(ctx, store, "20260301T000000Z-00000000", &bufRestorer{})
	res, pruneErr := backup.Prune(ctx, store, backup.Policy{KeepLast: 1}, time.Now())
	checks["Prune"] = pruneErr
	_, checks["CleanIncomplete"] = store.CleanIncomplete(ctx, "", time.Now())
	checks["Delete"] = store.Delete(ctx, "x")
	for name, err := range checks {
		if !errors.Is(err, backup.ErrStoreUnavailable) || !strings.Contains(err.Error(), cfg.Endpoint) {
			t.Errorf("%s: error = %v, want ErrStoreUnavailable naming %s", name, err, cfg.Endpoint)
		}
	}
	if !strings.Contains(pruneErr.Error(), "nothing deleted") || len(res.Deleted)+len(res.DeletedIncomplete) != 0 {
		t.Errorf("Prune = %+v, %v; want nothing deleted", res, pruneErr)
	}
}

func TestMissingBucket(t *testing.T) {
	startServer(t)
	store, err := s3.New(config("does-not-exist", ""))
	if err != nil {
		t.Fatal(err)
	}
	err = store.Check(t.Context())
	if !errors.Is(err, backup.ErrStoreUnavailable) || !strings.Contains(err.Error(), "does-not-exist") {
		t.Errorf("Check = %v, want ErrStoreUnavailable naming the bucket", err)
	}
	if _, err := store.List(t.Context(), ""); !errors.Is(err, backup.ErrStoreUnavailable) {
		t.Errorf("List = %v, want ErrStoreUnavailable", err)
	}
}

func TestBadCredentials(t *testing.T) {
	bucket := newBucket(t)
	cfg := config(bucket, "")
	cfg.SecretAccessKey = "wrong"
	store, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = store.Check(t.Context())
	if err == nil || errors.Is(err, backup.ErrStoreUnavailable) {
		t.Errorf("Check with a wrong secret = %v, want an authentication error", err)
	}
}

func TestNewOptions(t *testing.T) {
	cfg := s3.Config{Endpoint: "https://s3.example.com", Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "b"}
	for _, tc := range []struct {
		name    string
		cfg     s3.Config
		opts    []s3.Option
		wantErr string
	}{
		{"defaults", cfg, nil, ""},
		{"all options", cfg, []s3.Option{s3.WithPartSize(64 << 20), s3.WithConcurrency(4), s3.WithMaxRetries(3), s3.WithTransport(nil)}, ""},
		{"part size too small", cfg, []s3.Option{s3.WithPartSize(4 << 20)}, "below the minimum"},
		{"no concurrency", cfg, []s3.Option{s3.WithConcurrency(0)}, "concurrency is 0"},
		{"negative retries", cfg, []s3.Option{s3.WithMaxRetries(-1)}, "negative"},
		{"invalid config", s3.Config{}, nil, `key "endpoint" is missing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := s3.New(tc.cfg, tc.opts...)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got, want := s.String(), "s3://bkt/ at https://s3.example.com"; got != want {
					t.Errorf("String() = %q, want %q", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func secret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "backup-s3"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestConfigFromSecret(t *testing.T) {
	full := map[string]string{
		"endpoint": "https://s3.eu-west-1.amazonaws.com", "bucket": "db-backups", "prefix": "/prod/orders",
		"accessKeyID": "AKIA", "secretAccessKey": "s3cr3t", "sessionToken": "tok", "region": "eu-west-1", "pathStyle": "true",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		data     map[string]string
		want     s3.Config
		wantErrs []string
	}{
		{
			name: "complete",
			data: full,
			want: s3.Config{Endpoint: "https://s3.eu-west-1.amazonaws.com", Bucket: "db-backups", Prefix: "prod/orders/",
				AccessKeyID: "AKIA", SecretAccessKey: "s3cr3t", SessionToken: "tok", Region: "eu-west-1", PathStyle: true},
		},
		{
			name: "minimal",
			data: map[string]string{"endpoint": "http://minio:9000", "bucket": "b-1", "accessKeyID": "a", "secretAccessKey": "b"},
			want: s3.Config{Endpoint: "http://minio:9000", Bucket: "b-1", AccessKeyID: "a", SecretAccessKey: "b"},
		},
		{
			name: "empty secret names every required key",
			data: map[string]string{},
			wantErrs: []string{
				`Secret db/backup-s3: key "endpoint" is missing; set it to the S3 API URL`,
				`key "bucket" is missing`, `key "accessKeyID" is missing`, `key "secretAccessKey" is missing`,
			},
		},
		{name: "endpoint without scheme", data: with("endpoint", "s3.amazonaws.com"), wantErrs: []string{`key "endpoint" is "s3.amazonaws.com": scheme must be http or https`}},
		{name: "endpoint with path", data: with("endpoint", "https://s3.amazonaws.com/bucket"), wantErrs: []string{"must not have a path"}},
		{name: "endpoint without host", data: with("endpoint", "https://"), wantErrs: []string{"host is missing"}},
		{name: "endpoint unparsable", data: with("endpoint", "http://[::1"), wantErrs: []string{`key "endpoint"`}},
		{name: "bad bucket", data: with("bucket", "Bad_Bucket"), wantErrs: []string{`key "bucket" is "Bad_Bucket"`}},
		{name: "bad prefix", data: with("prefix", "a/../b"), wantErrs: []string{`key "prefix"`}},
		{name: "bad pathStyle", data: with("pathStyle", "yes please"), wantErrs: []string{`key "pathStyle" is "yes please", not a boolean; set it to "true" or "false"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s3.ConfigFromSecret(secret(tc.data))
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("Config (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, s3.ErrInvalidConfig) {
				t.Fatalf("error = %v, want ErrInvalidConfig", err)
			}
			var ce *s3.ConfigError
			if !errors.As(err, &ce) || ce.Secret != "db/backup-s3" {
				t.Errorf("error %v is not a *ConfigError for db/backup-s3", err)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, s3.Config{AccessKeyID: "AKIA", SecretAccessKey: "s3cr3t", SessionToken: "tok"})
		if strings.Contains(out, "s3cr3t") || strings.Contains(out, "tok}") || !strings.Contains(out, "AKIA") {
			t.Errorf("Sprintf(%q, Config) = %s: leaks the secret or hides the key ID", format, out)
		}
	}
	if _, err := s3.ConfigFromSecret(nil); err == nil {
		t.Error("ConfigFromSecret(nil) succeeded")
	}
	sd := &corev1.Secret{StringData: map[string]string{"endpoint": "http://x", "bucket": "bkt", "accessKeyID": "a", "secretAccessKey": "b"}}
	if _, err := s3.ConfigFromSecret(sd); err != nil {
		t.Errorf("ConfigFromSecret with StringData: %v", err)
	}
}

// BenchmarkBackup backs up a 64 MiB synthetic snapshot into versitygw. The
// 1 GiB measurement with peak RSS is backup/s3/internal/benchprog.
func BenchmarkBackup(b *testing.B) {
	const size = 64 << 20
	store := newStore(b, "bench")
	b.SetBytes(size)
	for b.Loop() {
		m, err := backup.Backup(b.Context(), store, backup.SnapshotterFunc(func(ctx context.Context, w io.Writer) (backup.Metadata, error) {
			_, err := storetest.NewGenerator(size).WriteTo(w)
			return backup.Metadata{Engine: "synthetic"}, err
		}))
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Delete(b.Context(), m.DataKey); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConfigNeverRevealsCredentials: an endpoint with credentials in it
// (user info) is refused, and neither the refusal nor the Config's
// description quotes them: those strings reach conditions, events and logs.
func TestConfigNeverRevealsCredentials(t *testing.T) {
	const user, password = "AKIAUSERINURL", "pa55InURL"
	for _, endpoint := range []string{
		"https://" + user + ":" + password + "@s3.example.com",
		"http://" + user + ":" + password + "@minio:9000/with/path",
		"https://" + user + ":" + password + "@[::1", // does not parse
		"s3.example.com://" + user + ":" + password + "@host",
	} {
		t.Run(endpoint, func(t *testing.T) {
			data := map[string]string{"endpoint": endpoint, "bucket": "b-1", "accessKeyID": "a", "secretAccessKey": "b"}
			_, err := s3.ConfigFromSecret(secret(data))
			if err == nil {
				t.Fatal("an endpoint with user info was accepted")
			}
			cfg := s3.Config{Endpoint: endpoint, Bucket: "b-1"}
			_, newErr := s3.New(cfg)
			for what, text := range map[string]string{
				"ConfigFromSecret's error": err.Error(),
				"Config.String":            cfg.String(),
				"Config.GoString":          fmt.Sprintf("%#v", cfg),
				"New's error":              fmt.Sprint(newErr),
			} {
				if strings.Contains(text, user) || strings.Contains(text, password) {
					t.Errorf("%s reveals the credentials: %s", what, text)
				}
			}
			if !strings.Contains(err.Error(), `key "endpoint"`) {
				t.Errorf("error %q does not name the endpoint key", err)
			}
		})
	}
}
