package fsstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opkit-dev/opkit/backup/fsstore"
)

func ExampleNew() {
	dir, err := os.MkdirTemp("", "volume")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()

	store, err := fsstore.New(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	n, err := store.Put(ctx, "team/hello.data", strings.NewReader("hello"))
	if err != nil {
		fmt.Println(err)
		return
	}
	objs, _ := store.List(ctx, "team/")
	fmt.Println(n, objs[0].Key, objs[0].Size)

	// A missing root usually means an unmounted volume: New refuses it.
	_, err = fsstore.New(filepath.Join(dir, "not-mounted"))
	fmt.Println(err != nil)
	// Output:
	// 5 team/hello.data 5
	// true
}
