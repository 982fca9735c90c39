package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/opkit-dev/opkit/backup"
)

const (
	// DefaultPartSize is the multipart part size. With at most 10000 parts
	// per upload it allows objects up to 78 GiB; see [WithPartSize].
	DefaultPartSize = 8 << 20
	// MinPartSize is the smallest part size accepted by [WithPartSize], the
	// S3 minimum for all parts but the last.
	MinPartSize = 5 << 20
	// DefaultConcurrency is the number of parts buffered and uploaded in
	// parallel.
	DefaultConcurrency = 2
	// smallObjectSize is the size up to which Put uses a single PUT.
	smallObjectSize = 1 << 20
)

// Option configures [New].
type Option func(*options)

type options struct {
	partSize    uint64
	concurrency uint
	transport   http.RoundTripper
	maxRetries  int
	unsigned    bool
}

// WithPartSize sets the multipart part size, at least [MinPartSize]. Memory
// per upload is part size × concurrency; the largest object is part size ×
// 10000 (an upload of a larger snapshot fails, it is never truncated). For
// example 64 MiB parts allow 625 GiB with 128 MiB of buffers at the default
// concurrency.
func WithPartSize(n uint64) Option { return func(o *options) { o.partSize = n } }

// WithConcurrency sets how many parts are buffered and uploaded in parallel
// (at least 1).
func WithConcurrency(n uint) Option { return func(o *options) { o.concurrency = n } }

// WithTransport sets the HTTP transport, for example to trust a private CA.
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.transport = rt } }

// WithMaxRetries sets how often a failed request is retried (minio-go's
// default is 10, with backoff). 1 means no retry.
func WithMaxRetries(n int) Option { return func(o *options) { o.maxRetries = n } }

// WithUnsignedPayload uploads with an UNSIGNED-PAYLOAD signature on plain
// HTTP endpoints. By default a plain-HTTP upload is signed chunk by chunk
// (SigV4 streaming: a SHA-256 per 64 KiB chunk on the client, verified by
// the server), which costs CPU on both sides; HTTPS endpoints never sign the
// payload, TLS protects it, so this option changes nothing for them.
//
// What is given up: on plain HTTP the server no longer rejects a body that
// was altered in transit. A corrupted backup is still refused at restore,
// because [backup.Restore] verifies the SHA-256 recorded in the manifest.
// Use it for a trusted network (loopback, a cluster-internal MinIO), not
// across the internet.
func WithUnsignedPayload() Option { return func(o *options) { o.unsigned = true } }

// Store is a [backup.Store] in an S3 bucket. It is safe for concurrent use.
type Store struct {
	client *minio.Client
	cfg    Config
	opts   options
}

var (
	_ backup.Store             = (*Store)(nil)
	_ backup.IncompleteCleaner = (*Store)(nil)
)

// New validates cfg and returns a Store. It does not contact the server; call
// [Store.Check] to verify the endpoint, credentials and bucket.
func New(cfg Config, opts ...Option) (*Store, error) {
	o := options{partSize: DefaultPartSize, concurrency: DefaultConcurrency}
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.partSize < MinPartSize {
		return nil, fmt.Errorf("s3 store: part size %d is below the minimum %d; use WithPartSize(s3.MinPartSize) or more", o.partSize, MinPartSize)
	}
	if o.concurrency < 1 {
		return nil, errors.New("s3 store: concurrency is 0; use WithConcurrency(1) or more")
	}
	if o.maxRetries < 0 {
		return nil, fmt.Errorf("s3 store: max retries %d is negative; use WithMaxRetries(1) for no retries", o.maxRetries)
	}
	cfg = cfg.normalized()
	host, secure, _ := parseEndpoint(cfg.Endpoint)
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken),
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    o.transport,
		MaxRetries:   o.maxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	return &Store{client: client, cfg: cfg, opts: o}, nil
}

// String describes the store as "s3://bucket/prefix at endpoint".
func (s *Store) String() string {
	return fmt.Sprintf("s3://%s/%s at %s", s.cfg.Bucket, s.cfg.Prefix, s.cfg.Endpoint)
}

// wrap adds context to err and marks network failures as
// backup.ErrStoreUnavailable.
func (s *Store) wrap(op, key string, err error) error {
	if key != "" {
		op += " " + key
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %s: %w", s, op, err)
	}
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) {
		return fmt.Errorf("%s: %s: %w: %w", s, op, backup.ErrStoreUnavailable, err)
	}
	if code := minio.ToErrorResponse(err).Code; code == minio.NoSuchBucket {
		return fmt.Errorf("%s: %s: %w: bucket does not exist, create it or fix the bucket key: %w", s, op, backup.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%s: %s: %w", s, op, err)
}

// Check verifies that the endpoint answers, the credentials are accepted and
// the bucket exists. Errors for an unreachable endpoint or a missing bucket
// wrap [backup.ErrStoreUnavailable].
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.wrap("check bucket", "", err)
	}
	if !ok {
		return fmt.Errorf("%s: %w: bucket %q does not exist; create it or fix the bucket key", s, backup.ErrStoreUnavailable, s.cfg.Bucket)
	}
	return nil
}

// Put implements [backup.Store.Put] with a streaming multipart upload (a
// single PUT for objects under 1 MiB). A failed or cancelled upload is
// aborted and leaves no object.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := backup.CheckKey(key); err != nil {
		return 0, fmt.Errorf("%s: put: %w", s, err)
	}
	name := s.cfg.Prefix + key
	// Read a small head to tell small objects from large ones.
	head := make([]byte, smallObjectSize)
	n, err := io.ReadFull(r, head)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		if err := ctx.Err(); err != nil {
			return 0, s.wrap("put", key, err)
		}
		info, err := s.client.PutObject(ctx, s.cfg.Bucket, name, bytes.NewReader(head[:n]), int64(n), minio.PutObjectOptions{
			ContentType:          "application/octet-stream",
			DisableContentSha256: s.opts.unsigned,
		})
		if err != nil {
			return 0, s.wrap("put", key, err)
		}
		return info.Size, nil
	case err != nil:
		return 0, s.wrap("put", key, err)
	}
	body := io.MultiReader(bytes.NewReader(head), r)
	info, err := s.client.PutObject(ctx, s.cfg.Bucket, name, body, -1, minio.PutObjectOptions{
		ContentType:           "application/octet-stream",
		PartSize:              s.opts.partSize,
		NumThreads:            s.opts.concurrency,
		ConcurrentStreamParts: s.opts.concurrency > 1,
		DisableContentSha256:  s.opts.unsigned,
	})
	if err != nil {
		return 0, s.wrap("put", key, err)
	}
	return info.Size, nil
}

// Get implements [backup.Store.Get].
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := backup.CheckKey(key); err != nil {
		return nil, fmt.Errorf("%s: get: %w", s, err)
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap("get", key, err)
	}
	// GetObject is lazy; Stat sends the request so errors surface here.
	if _, err := obj.Stat(); err != nil {
		_ = obj.Close()
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("%s: get %s: %w", s, key, backup.ErrNotFound)
		}
		return nil, s.wrap("get", key, err)
	}
	return obj, nil
}

// List implements [backup.Store.List].
func (s *Store) List(ctx context.Context, prefix string) ([]backup.ObjectInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []backup.ObjectInfo
	for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.wrap("list", strings.TrimSuffix(prefix, "/")+"*", o.Err)
		}
		key, ok := strings.CutPrefix(o.Key, s.cfg.Prefix)
		if !ok || strings.HasSuffix(key, "/") {
			continue
		}
		out = append(out, backup.ObjectInfo{Key: key, Size: o.Size, ModTime: o.LastModified})
	}
	return out, nil
}

// Delete implements [backup.Store.Delete].
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := backup.CheckKey(key); err != nil {
		return fmt.Errorf("%s: delete: %w", s, err)
	}
	err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return s.wrap("delete", key, err)
	}
	return nil
}

// CleanIncomplete implements [backup.IncompleteCleaner]: it aborts
// multipart uploads under prefix initiated before olderThan.
func (s *Store) CleanIncomplete(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var names []string
	for u := range s.client.ListIncompleteUploads(ctx, s.cfg.Bucket, s.cfg.Prefix+prefix, true) {
		if u.Err != nil {
			return 0, s.wrap("list unfinished uploads", "", u.Err)
		}
		if u.Initiated.Before(olderThan) && !slices.Contains(names, u.Key) {
			names = append(names, u.Key)
		}
	}
	removed := 0
	var errs []error
	for _, name := range names {
		if err := s.client.RemoveIncompleteUpload(ctx, s.cfg.Bucket, name); err != nil {
			errs = append(errs, s.wrap("abort unfinished upload", name, err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
