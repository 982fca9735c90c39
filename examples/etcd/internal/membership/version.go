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

// minorUpgradeFloor is, by the minor version a cluster runs, the lowest
// patch release etcd's upgrade guide lets upgrade to the next minor one:
// 3.5 releases before 3.5.26 fail the upgrade to 3.6 ("too many learner
// members") or leave zombie members, which learner-first growth triggers.
var minorUpgradeFloor = map[[2]int]int{{3, 5}: 26}

// CheckUpgrade reports whether a cluster running from can be moved to to:
// patch changes within a minor version (up or down) and upgrades by exactly
// one minor version from a patch release etcd supports it from (3.5.26 for
// 3.6) are allowed; downgrades of the minor version, jumps of more than one
// minor version and major version changes are not. An empty from (a
// cluster not yet running) accepts any to.
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
	case t.minor == f.minor+1 && f.patch < minorUpgradeFloor[[2]int{f.major, f.minor}]:
		floor := fmt.Sprintf("%d.%d.%d", f.major, f.minor, minorUpgradeFloor[[2]int{f.major, f.minor}])
		return fmt.Errorf("%w: %s to %s needs %s or later first, as etcd's upgrade guide says (earlier releases fail the upgrade or leave zombie members); set spec.version to %s first",
			ErrUnsupportedUpgrade, from, to, floor, floor)
	}
	return nil
}

// CheckRestore reports whether a backup taken from etcd backupVersion can
// be restored into a cluster of version clusterVersion: not from a newer
// minor or major version, whose data an older etcd does not read. An
// empty or unparsable backupVersion (a backup that did not record one) is
// accepted.
func CheckRestore(backupVersion, clusterVersion string) error {
	b, err := parseVersion(backupVersion)
	if err != nil {
		return nil //nolint:nilerr // a backup without a readable version is not refused
	}
	c, err := parseVersion(clusterVersion)
	if err != nil {
		return err
	}
	if b.major > c.major || (b.major == c.major && b.minor > c.minor) {
		return fmt.Errorf("%w: the backup was taken from etcd %s, newer than %s, which cannot read its data; set spec.version to %d.%d or later",
			ErrUnsupportedUpgrade, backupVersion, clusterVersion, b.major, b.minor)
	}
	return nil
}
