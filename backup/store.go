package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrNotFound is returned (wrapped) by [Store.Get] when the key does not exist,
// and by [Restore] and [Verify] when a backup has no manifest.
var ErrNotFound = errors.New("not found")

// ErrStoreUnavailable is wrapped into errors from stores that could not be
// reached at all (network error, missing mount). Callers can branch on it with
// [errors.Is] to report the store, not the backup, as the problem.
var ErrStoreUnavailable = errors.New("backup store unavailable")

// ErrInvalidKey is wrapped into errors for keys rejected by [CheckKey].
var ErrInvalidKey = errors.New("invalid key")

// ObjectInfo describes one committed object in a [Store].
type ObjectInfo struct {
	// Key is the object's key relative to the store (and to the prefix of a
	// [Sub] store).
	Key string
	// Size is the object's size in bytes.
	Size int64
	// ModTime is when the object was written. For S3 multipart uploads this
	// is when the upload started.
	ModTime time.Time
}

// Store is a streaming object store for backups. Implementations must be safe
// for concurrent use.
//
// Keys are slash-separated paths accepted by [CheckKey]. Implementations
// return an error wrapping [ErrInvalidKey] for other keys.
type Store interface {
	// Put reads r until io.EOF and stores the bytes under key, replacing any
	// object with that key. It is atomic: until Put returns nil no object with
	// the new content is visible, and when r returns an error other than
	// io.EOF, or ctx is cancelled, Put returns an error and leaves no partial
	// object behind. Put returns the number of bytes stored. Memory use must
	// not grow with the size of the object.
	Put(ctx context.Context, key string, r io.Reader) (int64, error)

	// Get opens the object stored under key. It returns an error wrapping
	// [ErrNotFound] when there is none. The caller closes the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, error)

	// List returns every committed object whose key starts with prefix, in
	// no particular order. Objects being written by Put are not listed.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)

	// Delete removes the object stored under key. Deleting a key that does
	// not exist is not an error.
	Delete(ctx context.Context, key string) error
}

// IncompleteCleaner is implemented by stores that can leave store-level
// leftovers behind when a writer dies mid-Put (temporary files, unfinished
// multipart uploads). [Prune] calls it with its incomplete grace period.
type IncompleteCleaner interface {
	// CleanIncomplete removes leftovers of unfinished Puts under prefix that
	// were started before olderThan and returns how many it removed.
	CleanIncomplete(ctx context.Context, prefix string, olderThan time.Time) (int, error)
}

const maxKeyLen = 512

// CheckKey reports whether key is a portable store key: 1 to 512 bytes of
// slash-separated segments, each made of ASCII letters, digits, '.', '_' and
// '-', not starting with '.' (reserved for stores' temporary files) and not
// empty. The error wraps [ErrInvalidKey].
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if len(key) > maxKeyLen {
		return fmt.Errorf("%w: key %q is longer than %d bytes", ErrInvalidKey, key, maxKeyLen)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" {
			return fmt.Errorf("%w: key %q has an empty path segment (leading, trailing or double '/')", ErrInvalidKey, key)
		}
		if seg[0] == '.' {
			return fmt.Errorf("%w: key %q has a segment starting with '.', which is reserved for temporary files", ErrInvalidKey, key)
		}
		for _, c := range seg {
			if !keyChar(c) {
				return fmt.Errorf("%w: key %q contains %q; use letters, digits, '.', '_', '-' and '/'", ErrInvalidKey, key, c)
			}
		}
	}
	return nil
}

func keyChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Sub returns a Store that prefixes every key with prefix + "/", so that
// several custom resources can share one store (for example
// Sub(store, namespace+"/"+name)). prefix must be a valid key (see
// [CheckKey]). The returned store implements [IncompleteCleaner] when the
// underlying store does.
func Sub(s Store, prefix string) (Store, error) {
	if s == nil {
		return nil, errors.New("backup.Sub: store is nil")
	}
	if err := CheckKey(prefix); err != nil {
		return nil, fmt.Errorf("backup.Sub: prefix: %w", err)
	}
	sub := subStore{s: s, prefix: prefix + "/"}
	if c, ok := s.(IncompleteCleaner); ok {
		return subCleanerStore{subStore: sub, c: c}, nil
	}
	return sub, nil
}

type subStore struct {
	s      Store
	prefix string
}

func (s subStore) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	return s.s.Put(ctx, s.prefix+key, r)
}

func (s subStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	return s.s.Get(ctx, s.prefix+key)
}

func (s subStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	objs, err := s.s.List(ctx, s.prefix+prefix)
	if err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if k, ok := strings.CutPrefix(o.Key, s.prefix); ok {
			o.Key = k
			out = append(out, o)
		}
	}
	return out, nil
}

func (s subStore) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return s.s.Delete(ctx, s.prefix+key)
}

type subCleanerStore struct {
	subStore
	c IncompleteCleaner
}

func (s subCleanerStore) CleanIncomplete(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	return s.c.CleanIncomplete(ctx, s.prefix+prefix, olderThan)
}
