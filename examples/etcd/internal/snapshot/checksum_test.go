package snapshot_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
)

var snapshotChecksum = etcdclient.ErrSnapshotChecksum

func TestChecksumWriter(t *testing.T) {
	t.Parallel()
	db := bytes.Repeat([]byte("etcd"), 5000)
	sum := sha256.Sum256(db)
	good := append(append([]byte(nil), db...), sum[:]...)
	bad := append([]byte(nil), good...)
	bad[10] ^= 1
	tests := []struct {
		name   string
		stream []byte
		chunk  int
		ok     bool
	}{
		{"intact, one write", good, len(good), true},
		{"intact, 7-byte writes", good, 7, true},
		{"intact, 31-byte writes", good, 31, true},
		{"corrupt data", bad, 4096, false},
		{"truncated", good[:len(good)-1], 4096, false},
		{"shorter than a checksum", good[:10], 4096, false},
		{"empty", nil, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			cw := etcdclient.NewChecksumWriter(&out)
			for i := 0; i < len(tt.stream); i += tt.chunk {
				if _, err := cw.Write(tt.stream[i:min(i+tt.chunk, len(tt.stream))]); err != nil {
					t.Fatal(err)
				}
			}
			err := cw.Verify()
			if (err == nil) != tt.ok {
				t.Fatalf("Verify() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, etcdclient.ErrSnapshotChecksum) {
				t.Errorf("Verify() = %v, want ErrSnapshotChecksum", err)
			}
			if !bytes.Equal(out.Bytes(), tt.stream) {
				t.Errorf("passed through %d bytes, want %d", out.Len(), len(tt.stream))
			}
		})
	}
}
