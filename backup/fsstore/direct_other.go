//go:build !linux

package fsstore

import (
	"errors"
	"os"
)

// directIOSupported reports whether this platform can write with O_DIRECT.
const directIOSupported = false

var errNoDirectIO = errors.New("O_DIRECT is not supported on this platform")

func setDirect(*os.File, bool) error { return errNoDirectIO }

func isDirectUnsupported(err error) bool { return errors.Is(err, errNoDirectIO) }
