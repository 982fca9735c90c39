package membership

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnsupportedUpgrade is returned (wrapped) by CheckUpgrade for version
// changes etcd does not support.
var ErrUnsupportedUpgrade = errors.New("unsupported etcd version change")

type semver struct{ major, minor, patch int }

func parseVersion(v string) (semver, error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return semver{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
	}
	var out [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return semver{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
		}
		out[i] = n
	}
	return semver{out[0], out[1], out[2]}, nil
}

// CheckUpgrade reports whether a cluster running from can be moved to to:
// patch changes within a minor version (up or down) and upgrades by exactly
// one minor version are allowed; downgrades of the minor version, jumps of
// more than one minor version and major version changes are not. An empty
// from (a cluster not yet running) accepts any to.
func CheckUpgrade(from, to string) error {
	t, err := parseVersion(to)
	if err != nil {
		return err
	}
	if from == "" {
		return nil
	}
	f, err := parseVersion(from)
	if err != nil {
		return err
	}
	switch {
	case f.major != t.major:
		return fmt.Errorf("%w: %s to %s changes the major version", ErrUnsupportedUpgrade, from, to)
	case t.minor < f.minor:
		return fmt.Errorf("%w: %s to %s is a downgrade; restore a backup into a new cluster instead", ErrUnsupportedUpgrade, from, to)
	case t.minor > f.minor+1:
		return fmt.Errorf("%w: %s to %s skips a minor version; upgrade to 3.%d first", ErrUnsupportedUpgrade, from, to, f.minor+1)
	}
	return nil
}
