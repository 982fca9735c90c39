package seedrestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
)

// behindLog reports whether a database that applied entries up to
// applied lacks entries the write-ahead log of the member in dataDir
// holds: etcd did not stop gracefully (killed, its node crashed) and its
// last entries are applied only once it starts again. A copy of such a
// database would lose them.
func behindLog(dataDir string, applied uint64) (bool, error) {
	last, err := lastLogIndex(filepath.Join(dataDir, MemberDir, "wal"))
	if err != nil {
		return false, err
	}
	return applied < last, nil
}

// database is what StageMember reads of a member's etcd database.
type database struct {
	// applied is the index of the last entry applied (bucket meta, key
	// consistent_index).
	applied uint64
	// members counts the members it records (bucket members, a key
	// each).
	members int
}

// readDatabase reads the etcd database at path, read-only.
func readDatabase(path string) (database, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return database{}, fmt.Errorf("opening the member's database: %w", err)
	}
	defer func() { _ = db.Close() }()
	var d database
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil {
			return errors.New("the member's database has no meta bucket")
		}
		v := meta.Get([]byte("consistent_index"))
		if len(v) != 8 {
			return errors.New("the member's database records no consistent index")
		}
		d.applied = binary.BigEndian.Uint64(v)
		if b := tx.Bucket([]byte("members")); b != nil {
			d.members = b.Stats().KeyN
		}
		return nil
	})
	return d, err
}

// Record types and fields of etcd's write-ahead log (server/storage/wal).
// Hand-decoded: the types live in etcd's server module, whose
// dependencies the operator does not otherwise need.
const (
	walEntryType    = 2 // walpb.Record.Type of a raftpb.Entry
	walRecordType   = 1 // walpb.Record fields
	walRecordData   = 3
	raftEntryIndex  = 3 // raftpb.Entry field
	walFrameLenMask = ^(uint64(0xff) << 56)
)

// lastLogIndex returns the index of the last entry in the write-ahead log
// in dir, 0 if there is none. A torn last record (a crash mid-write) ends
// the log.
func lastLogIndex(dir string) (uint64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return 0, fmt.Errorf("listing the write-ahead log: %w", err)
	}
	slices.Sort(names) // <seq>-<index>.wal, zero-padded hex
	var last uint64
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return 0, fmt.Errorf("reading the write-ahead log: %w", err)
		}
		for len(b) >= 8 {
			lenField := binary.LittleEndian.Uint64(b)
			size := lenField & walFrameLenMask
			var pad uint64
			if lenField&(1<<63) != 0 {
				pad = (lenField >> 56) & 0x7
			}
			if size == 0 || uint64(len(b)-8) < size+pad {
				break // preallocated zeros, or torn
			}
			if i, ok := entryIndex(b[8 : 8+size]); ok {
				last = i
			}
			b = b[8+size+pad:]
		}
	}
	return last, nil
}

// entryIndex decodes a walpb.Record and returns the index of the
// raftpb.Entry it holds, if it holds one.
func entryIndex(rec []byte) (uint64, bool) {
	var typ uint64
	var data []byte
	for len(rec) > 0 {
		num, wt, n := protowire.ConsumeTag(rec)
		if n < 0 {
			return 0, false
		}
		rec = rec[n:]
		switch {
		case num == walRecordType && wt == protowire.VarintType:
			typ, n = protowire.ConsumeVarint(rec)
		case num == walRecordData && wt == protowire.BytesType:
			data, n = protowire.ConsumeBytes(rec)
		default:
			n = protowire.ConsumeFieldValue(num, wt, rec)
		}
		if n < 0 {
			return 0, false
		}
		rec = rec[n:]
	}
	if typ != walEntryType {
		return 0, false
	}
	for len(data) > 0 {
		num, wt, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, false
		}
		data = data[n:]
		if num == raftEntryIndex && wt == protowire.VarintType {
			v, n := protowire.ConsumeVarint(data)
			return v, n >= 0
		}
		if n = protowire.ConsumeFieldValue(num, wt, data); n < 0 {
			return 0, false
		}
		data = data[n:]
	}
	return 0, false
}
