package fsstore

import (
	"context"
	"errors"
	"io"
	"os"
	"unsafe"
)

const (
	// directChunk is the size of each of the two buffers a direct-I/O Put
	// writes from: one is written to the device while the other is filled.
	directChunk = 4 << 20
	// directAlign is the alignment of O_DIRECT buffers, offsets and lengths:
	// the logical block size, 4 KiB or less on common devices.
	directAlign = 4096
)

// setDirectFn turns O_DIRECT on or off (a variable so that tests can
// simulate a filesystem that refuses it).
var setDirectFn = setDirect

// alignedBuffer returns a directChunk-long slice whose first byte is
// directAlign-aligned.
func alignedBuffer() []byte {
	raw := make([]byte, directChunk+directAlign)
	off := (directAlign - int(uintptr(unsafe.Pointer(&raw[0]))%directAlign)) % directAlign
	return raw[off : off+directChunk : off+directChunk]
}

// copyDirect copies r into f, which must be empty, with O_DIRECT: the data
// goes from two aligned buffers straight to the device, one written while
// the other is filled from r, and never through the page cache. The tail
// that is not a multiple of directAlign is written through the page cache
// (the caller's fsync makes it durable). Where the filesystem refuses
// O_DIRECT, when enabling it or on a write, the copy continues with
// buffered writes.
func copyDirect(ctx context.Context, f *os.File, r io.Reader) (int64, error) {
	w := &directWriter{wb: writebackWriter{f: f}}
	if err := setDirectFn(f, true); err != nil {
		// Not supported here: a buffered copy, as without direct I/O.
		return io.CopyBuffer(&w.wb, ctxReader{ctx: ctx, r: r}, make([]byte, copyBufferSize))
	}
	w.direct = true

	type chunk struct {
		buf []byte
		n   int
	}
	free := make(chan []byte, 2)
	free <- alignedBuffer()
	free <- alignedBuffer()
	full := make(chan chunk)
	stop := make(chan struct{}) // closed when the writer fails
	written := make(chan error, 1)
	go func() {
		var err error
		for c := range full {
			if err == nil {
				if err = w.write(c.buf[:c.n]); err != nil {
					close(stop)
				}
			}
			free <- c.buf
		}
		written <- err
	}()

	var n int64
	var readErr error
	src := ctxReader{ctx: ctx, r: r}
read:
	for {
		var buf []byte
		select {
		case <-stop: // a failed writer wins over a free buffer
			break read
		default:
		}
		select {
		case buf = <-free:
		case <-stop:
			break read
		}
		m, err := io.ReadFull(src, buf)
		if m > 0 {
			n += int64(m)
			full <- chunk{buf, m}
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			break read
		case err != nil:
			readErr = err
			break read
		}
	}
	close(full)
	if err := <-written; err != nil {
		return w.wb.off, err
	}
	return n, readErr
}

// directWriter writes chunks with O_DIRECT while direct is set, and through
// wb (buffered, with early writeback) otherwise.
type directWriter struct {
	wb     writebackWriter
	direct bool
}

// write writes p, which is directChunk long except for the last chunk.
func (w *directWriter) write(p []byte) error {
	if aligned := len(p) &^ (directAlign - 1); w.direct && aligned > 0 {
		m, err := w.wb.f.Write(p[:aligned])
		w.wb.off += int64(m)
		w.wb.started = w.wb.off
		switch {
		case err != nil && m == 0 && isDirectUnsupported(err):
			// The filesystem took the flag but refuses the I/O: nothing
			// was written, continue buffered.
			if err := w.buffered(); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			p = p[aligned:]
		}
	}
	if len(p) == 0 {
		return nil
	}
	// The unaligned tail of the last chunk, or everything once buffered.
	if w.direct {
		if err := w.buffered(); err != nil {
			return err
		}
	}
	_, err := w.wb.Write(p)
	return err
}

// buffered turns O_DIRECT off for the rest of the copy.
func (w *directWriter) buffered() error {
	if err := setDirectFn(w.wb.f, false); err != nil {
		return err
	}
	w.direct = false
	return nil
}
