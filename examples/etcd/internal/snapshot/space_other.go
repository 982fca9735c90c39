//go:build !unix

package snapshot

import "errors"

func availableBytes(string) (uint64, error) {
	return 0, errors.New("free space is not known on this system")
}
