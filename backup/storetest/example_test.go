package storetest_test

import (
	"testing"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/backup/storetest"
)

// A store's test runs the suite against a fresh, empty store each time.
func ExampleRun() {
	_ = func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) backup.Store {
			s, err := fsstore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, storetest.Options{})
	}
}
