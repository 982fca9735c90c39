package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
)

// ErrChecksumMismatch is matched (with [errors.Is]) by a [*VerificationError]
// for data whose SHA-256 differs from its manifest.
var ErrChecksumMismatch = errors.New("backup data SHA-256 does not match the manifest")

// ErrSizeMismatch is matched (with [errors.Is]) by a [*VerificationError] for
// data whose size differs from its manifest.
var ErrSizeMismatch = errors.New("backup data size does not match the manifest")

// VerificationError reports backup data that does not match its manifest.
// The data is corrupt or was replaced; it must not be restored.
type VerificationError struct {
	// ID is the backup's ID.
	ID string
	// Field is "size" or "sha256".
	Field string
	// Want is the value recorded in the manifest.
	Want string
	// Got is the value observed while reading the data.
	Got string
}

// Error implements error.
func (e *VerificationError) Error() string {
	return fmt.Sprintf("backup %s is corrupt: data %s is %s, manifest says %s; the backup cannot be restored, restore an older one", e.ID, e.Field, e.Got, e.Want)
}

// Unwrap returns [ErrSizeMismatch] or [ErrChecksumMismatch].
func (e *VerificationError) Unwrap() error {
	if e.Field == "size" {
		return ErrSizeMismatch
	}
	return ErrChecksumMismatch
}

// Restore reads backup id from store, passes it to r.Stage while verifying
// size and SHA-256 against the manifest, reads and verifies whatever Stage
// left unread, and calls r.Commit only if everything matched. Otherwise it
// calls r.Abort and returns the error; a mismatch is a [*VerificationError].
//
// A backup without a manifest (incomplete or missing) gives an error wrapping
// [ErrNotFound]; Stage is not called.
func Restore(ctx context.Context, store Store, id string, r Restorer) (Manifest, error) {
	if r == nil {
		return Manifest{}, errors.New("backup: restorer is nil")
	}
	return restore(ctx, store, id, r)
}

// Verify reads backup id from store and checks it against its manifest
// without restoring it. It returns the manifest, or a [*VerificationError]
// for corrupt data.
func Verify(ctx context.Context, store Store, id string) (Manifest, error) {
	return restore(ctx, store, id, nil)
}

func restore(ctx context.Context, store Store, id string, r Restorer) (Manifest, error) {
	if store == nil {
		return Manifest{}, errors.New("backup: store is nil")
	}
	m, err := readManifest(ctx, store, id)
	if err != nil {
		return Manifest{}, err
	}
	rc, err := store.Get(ctx, m.DataKey)
	if err != nil {
		return m, fmt.Errorf("backup %s: opening data: %w", id, err)
	}
	defer func() { _ = rc.Close() }()

	vr := &verifyingReader{r: rc, m: m, h: sha256.New()}
	abort := func(cause error) error {
		if r == nil {
			return cause
		}
		if aerr := r.Abort(context.WithoutCancel(ctx), m); aerr != nil {
			return errors.Join(cause, fmt.Errorf("backup %s: abort: %w", id, aerr))
		}
		return cause
	}

	if r != nil {
		if err := r.Stage(ctx, vr, m); err != nil {
			if vr.err != nil && !errors.Is(err, vr.err) {
				err = errors.Join(vr.err, err)
			}
			return m, abort(fmt.Errorf("backup %s: stage: %w", id, err))
		}
	}
	// Verify what Stage did not read.
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return m, abort(fmt.Errorf("backup %s: reading data: %w", id, err))
	}
	if !vr.ok {
		// Stage swallowed an error from the reader.
		err := vr.err
		if err == nil {
			err = errors.New("data was not read to the end")
		}
		return m, abort(fmt.Errorf("backup %s: %w", id, err))
	}
	if r != nil {
		if err := r.Commit(ctx, m); err != nil {
			return m, fmt.Errorf("backup %s: commit: %w", id, err)
		}
	}
	return m, nil
}

// verifyingReader passes through the data, never more than the manifest's
// size, and returns a *VerificationError instead of io.EOF on a mismatch.
type verifyingReader struct {
	r   io.Reader
	m   Manifest
	h   hash.Hash
	n   int64
	err error // sticky error
	ok  bool  // reached EOF with a match
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	if v.n+int64(n) > v.m.Size {
		// Never hand out bytes beyond the recorded size.
		n = int(v.m.Size - v.n)
		v.h.Write(p[:n])
		v.n += int64(n)
		v.err = &VerificationError{ID: v.m.ID, Field: "size", Want: strconv.FormatInt(v.m.Size, 10), Got: "more than " + strconv.FormatInt(v.m.Size, 10)}
		return n, v.err
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		if v.n != v.m.Size {
			v.err = &VerificationError{ID: v.m.ID, Field: "size", Want: strconv.FormatInt(v.m.Size, 10), Got: strconv.FormatInt(v.n, 10)}
			return n, v.err
		}
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.m.SHA256 {
			v.err = &VerificationError{ID: v.m.ID, Field: "sha256", Want: v.m.SHA256, Got: got}
			return n, v.err
		}
		v.ok = true
		v.err = io.EOF
		return n, io.EOF
	case err != nil:
		v.err = fmt.Errorf("reading data: %w", err)
		return n, v.err
	}
	return n, nil
}
