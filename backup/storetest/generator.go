package storetest

import "io"

const genBlockSize = 1 << 20

// Generator yields a synthetic snapshot of a fixed size from memory: one
// 1 MiB pseudo-random block whose first 8 bytes are stamped with a counter,
// so that no two blocks are equal. It implements io.WriterTo, writing whole
// blocks without copying.
type Generator struct {
	remaining int64
	block     []byte
	off       int
	seq       uint64
}

// NewGenerator returns a Generator of size bytes.
func NewGenerator(size int64) *Generator {
	b := make([]byte, genBlockSize)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return &Generator{remaining: size, block: b, off: genBlockSize}
}

func (g *Generator) next() {
	g.seq++
	for i := range 8 {
		g.block[i] = byte(g.seq >> (8 * i))
	}
	g.off = 0
}

// Read implements io.Reader.
func (g *Generator) Read(p []byte) (int, error) {
	if g.remaining == 0 {
		return 0, io.EOF
	}
	if g.off == genBlockSize {
		g.next()
	}
	end := genBlockSize
	if rem := int64(genBlockSize - g.off); g.remaining < rem {
		end = g.off + int(g.remaining)
	}
	n := copy(p, g.block[g.off:end])
	g.off += n
	g.remaining -= int64(n)
	return n, nil
}

// WriteTo implements io.WriterTo.
func (g *Generator) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for g.remaining > 0 {
		g.next()
		chunk := g.block[:min(int64(genBlockSize), g.remaining)]
		n, err := w.Write(chunk)
		total += int64(n)
		g.remaining -= int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
