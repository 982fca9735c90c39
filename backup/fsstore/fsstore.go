package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/backup"
)

// copyBufferSize is the size of the buffer Put copies through.
const copyBufferSize = 1 << 20

// tempMarker is part of the names of temporary files: ".<base>.tmp-<random>".
const tempMarker = ".tmp-"

// Store is a [backup.Store] rooted at a directory. Keys map to paths below
// the root; "a/b" is the file "<root>/a/b". It is safe for concurrent use.
type Store struct {
	root   string
	direct bool
}

// Option configures [New].
type Option func(*Store)

// WithDirectIO sets whether Put writes with O_DIRECT (Linux only; default
// on). Direct I/O sends the data from two 4 MiB buffers straight to the
// device instead of through the page cache: on Linux it was measured faster
// than a buffered write followed by fsync (docs/benchmarks/backup.md), and a
// backup does not evict the cached pages of the database on the same node.
// Where the filesystem refuses O_DIRECT (some network and FUSE
// filesystems), Put falls back to buffered writes by itself; turn it off
// for a filesystem that accepts O_DIRECT but performs poorly with it.
func WithDirectIO(on bool) Option { return func(s *Store) { s.direct = on } }

var (
	_ backup.Store             = (*Store)(nil)
	_ backup.IncompleteCleaner = (*Store)(nil)
)

// New returns a Store rooted at the existing directory root. It does not
// create root: a missing root usually means the volume is not mounted, and
// writing into the container's own filesystem instead would lose backups.
func New(root string, opts ...Option) (*Store, error) {
	if root == "" {
		return nil, errors.New("fsstore: root is empty; set it to the directory where the backup volume is mounted")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fsstore: root %q: %w", root, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("fsstore: root %q: %w: %w; mount the backup volume there or create the directory", abs, backup.ErrStoreUnavailable, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("fsstore: root %q is not a directory; point it at the directory where the backup volume is mounted", abs)
	}
	s := &Store{root: abs, direct: directIOSupported}
	for _, o := range opts {
		o(s)
	}
	s.direct = s.direct && directIOSupported
	return s, nil
}

// Root returns the absolute root directory.
func (s *Store) Root() string { return s.root }

func (s *Store) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// checkRoot reports a missing root (an unmounted volume) as unavailable.
func (s *Store) checkRoot() error {
	if _, err := os.Stat(s.root); err != nil {
		return fmt.Errorf("fsstore: root %q: %w: %w", s.root, backup.ErrStoreUnavailable, err)
	}
	return nil
}

// Put implements [backup.Store.Put]: temporary file, fsync, rename, fsync of
// the directory. Parent directories of key are created as needed.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (n int64, err error) {
	if err := backup.CheckKey(key); err != nil {
		return 0, fmt.Errorf("fsstore: put: %w", err)
	}
	if err := s.checkRoot(); err != nil {
		return 0, err
	}
	final := s.path(key)
	dir := filepath.Dir(final)
	if err := s.ensureDir(dir); err != nil {
		return 0, fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(final)+tempMarker+"*")
	if err != nil {
		return 0, fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()

	if s.direct {
		n, err = copyDirect(ctx, f, r)
	} else {
		n, err = io.CopyBuffer(&writebackWriter{f: f}, ctxReader{ctx: ctx, r: r}, make([]byte, copyBufferSize))
	}
	if err != nil {
		return n, fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	if err = f.Sync(); err != nil {
		return n, fmt.Errorf("fsstore: put %s: fsync: %w", key, err)
	}
	if err = f.Close(); err != nil {
		return n, fmt.Errorf("fsstore: put %s: close: %w", key, err)
	}
	if err = ctx.Err(); err != nil {
		return n, fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	if err = os.Rename(tmp, final); err != nil {
		return n, fmt.Errorf("fsstore: put %s: rename: %w", key, err)
	}
	if err = syncDir(dir); err != nil {
		// The object is in place but may not survive a crash.
		return n, fmt.Errorf("fsstore: put %s: fsync directory: %w", key, err)
	}
	return n, nil
}

// Get implements [backup.Store.Get]. The returned reader is an *os.File.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := backup.CheckKey(key); err != nil {
		return nil, fmt.Errorf("fsstore: get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fsstore: get %s: %w", key, err)
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		if rerr := s.checkRoot(); rerr != nil {
			return nil, rerr
		}
		return nil, fmt.Errorf("fsstore: get %s: %w", key, backup.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("fsstore: get %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("fsstore: get %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("fsstore: get %s: not a regular file: %w", key, backup.ErrNotFound)
	}
	return f, nil
}

// List implements [backup.Store.List]. Hidden files (temporary files of
// unfinished Puts) are not listed.
func (s *Store) List(ctx context.Context, prefix string) ([]backup.ObjectInfo, error) {
	if err := s.checkRoot(); err != nil {
		return nil, err
	}
	var out []backup.ObjectInfo
	err := s.walk(ctx, prefix, func(key string, d fs.DirEntry) error {
		if strings.HasPrefix(d.Name(), ".") || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted concurrently
		}
		if err != nil {
			return err
		}
		out = append(out, backup.ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fsstore: list %q: %w", prefix, err)
	}
	return out, nil
}

// walk calls fn for each file below the root whose key starts with prefix.
func (s *Store) walk(ctx context.Context, prefix string, fn func(key string, d fs.DirEntry) error) error {
	return filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != s.root {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == s.root {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			// Descend only into directories that can contain matches.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		return fn(key, d)
	})
}

// Delete implements [backup.Store.Delete].
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := backup.CheckKey(key); err != nil {
		return fmt.Errorf("fsstore: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fsstore: delete %s: %w", key, err)
	}
	if err := s.checkRoot(); err != nil {
		return err
	}
	p := s.path(key)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("fsstore: delete %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("fsstore: delete %s: fsync directory: %w", key, err)
	}
	return nil
}

// CleanIncomplete implements [backup.IncompleteCleaner]: it removes
// temporary files of unfinished Puts below prefix last modified before
// olderThan.
func (s *Store) CleanIncomplete(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	if err := s.checkRoot(); err != nil {
		return 0, err
	}
	removed := 0
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != s.root {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || !d.Type().IsRegular() || !strings.HasPrefix(name, ".") || !strings.Contains(name, tempMarker) {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		// The key the temporary file was going to become.
		dir, base := path.Split(filepath.ToSlash(rel))
		target := dir + strings.TrimPrefix(base[:strings.LastIndex(base, tempMarker)], ".")
		if !strings.HasPrefix(target, prefix) {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.ModTime().Before(olderThan) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("fsstore: cleaning temporary files: %w", err)
	}
	return removed, nil
}

// ensureDir creates dir (below the root) if needed and makes the new
// directory entries durable by syncing their parents.
func (s *Store) ensureDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for d := dir; d != s.root && strings.HasPrefix(d, s.root); d = filepath.Dir(d) {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("fsync directory: %w", err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writebackWindow is how much Put writes before it starts the writeback of
// what it wrote, so that writing to disk overlaps with receiving data.
const writebackWindow = 8 << 20

// writebackWriter writes to f and starts writeback every writebackWindow
// bytes. It also hides os.File's ReadFrom so that Put's buffer size is used.
type writebackWriter struct {
	f            *os.File
	off, started int64
}

func (w *writebackWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= writebackWindow {
		startWriteback(w.f, w.started, w.off-w.started)
		w.started = w.off
	}
	return n, err
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
