package main

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"

	"github.com/opkit-dev/opkit/backup/storetest"
)

// directAlign is the buffer, offset and length alignment O_DIRECT needs
// (the logical block size; 4 KiB covers every common device).
const directAlign = 4096

// writeDirect writes size bytes of the generator to path with O_DIRECT and
// fsyncs: the page cache is bypassed, so this is the device's own
// sequential write bandwidth, the bound of any durable write.
func writeDirect(path string, size int64) (int64, error) {
	if size%directAlign != 0 {
		return 0, fmt.Errorf("disk mode: size %d is not a multiple of %d", size, directAlign)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_DIRECT, 0o600)
	if err != nil {
		return 0, fmt.Errorf("disk mode: %w", err)
	}
	defer func() { _ = f.Close() }()
	const chunk = 8 << 20
	raw := make([]byte, chunk+directAlign)
	off := int(directAlign-uintptr(unsafe.Pointer(&raw[0]))%directAlign) % directAlign
	buf := raw[off : off+chunk]
	g := storetest.NewGenerator(size)
	var n int64
	for n < size {
		m, err := io.ReadFull(g, buf[:min(int64(chunk), size-n)])
		if err != nil {
			return n, err
		}
		w, err := f.Write(buf[:m])
		n += int64(w)
		if err != nil {
			return n, err
		}
	}
	if err := f.Sync(); err != nil {
		return n, err
	}
	return n, f.Close()
}
