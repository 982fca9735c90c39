package backup

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

// ManifestFormatVersion is the manifest format written by this package.
const ManifestFormatVersion = 1

const (
	dataSuffix     = ".data"
	manifestSuffix = ".manifest.json"
	modulePath     = "github.com/opkit-dev/opkit"
)

// idPattern matches IDs made by newID: UTC start time to the second and a
// random suffix, so that IDs sort by time.
var idPattern = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$`)

// Manifest is the record written after a backup's data is stored. Its presence
// is what makes a backup complete.
type Manifest struct {
	// FormatVersion is [ManifestFormatVersion] at the time of writing.
	FormatVersion int `json:"formatVersion"`
	// ID identifies the backup within its store.
	ID string `json:"id"`
	// DataKey is the store key of the snapshot data.
	DataKey string `json:"dataKey"`
	// Size is the size of the data in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex SHA-256 of the data.
	SHA256 string `json:"sha256"`
	// StartTime is when the backup started (before any quiesce).
	StartTime time.Time `json:"startTime"`
	// EndTime is when the data was stored.
	EndTime time.Time `json:"endTime"`
	// Snapshot is the metadata returned by the [Snapshotter].
	Snapshot Metadata `json:"snapshot"`
	// OpkitVersion is the version of the opkit module that wrote the
	// backup, "(devel)" when unknown.
	OpkitVersion string `json:"opkitVersion"`
}

// DataKeyFor returns the store key of the data object of backup id.
func DataKeyFor(id string) string { return id + dataSuffix }

// ManifestKeyFor returns the store key of the manifest of backup id.
func ManifestKeyFor(id string) string { return id + manifestSuffix }

// CheckID reports whether id has the form of IDs made by [Backup]
// ("20060102T150405Z-" followed by 8 hex digits).
func CheckID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: backup ID %q does not have the form 20060102T150405Z-0123abcd", ErrInvalidKey, id)
	}
	return nil
}

// validate checks a manifest read from the store for backup id.
func (m Manifest) validate(id string) error {
	switch {
	case m.FormatVersion < 1 || m.FormatVersion > ManifestFormatVersion:
		return fmt.Errorf("manifest formatVersion %d is not supported (this opkit reads 1..%d)", m.FormatVersion, ManifestFormatVersion)
	case m.ID != id:
		return fmt.Errorf("manifest id %q does not match its key %q", m.ID, id)
	case m.DataKey != DataKeyFor(id):
		return fmt.Errorf("manifest dataKey %q is not %q", m.DataKey, DataKeyFor(id))
	case m.Size < 0:
		return fmt.Errorf("manifest size %d is negative", m.Size)
	case !validSHA256(m.SHA256):
		return fmt.Errorf("manifest sha256 %q is not 64 lowercase hex digits", m.SHA256)
	}
	return nil
}

func validSHA256(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Version returns the version of the opkit module linked into the running
// binary, or "(devel)" when it cannot be determined (for example in opkit's
// own tests).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == modulePath && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "(devel)"
}
