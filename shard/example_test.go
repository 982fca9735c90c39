package shard_test

import (
	"fmt"

	"github.com/opkit-dev/opkit/shard"
)

// Every replica computes the same owner from the same members; when
// replica-b leaves, only its objects move.
func ExampleOwner() {
	three := []string{"replica-a", "replica-b", "replica-c"}
	two := []string{"replica-a", "replica-c"}
	for _, key := range []string{"default/cache-1", "default/cache-2", "default/cache-3"} {
		fmt.Printf("%s: %s, then %s\n", key, shard.Owner(key, three), shard.Owner(key, two))
	}
	// Output:
	// default/cache-1: replica-a, then replica-a
	// default/cache-2: replica-a, then replica-a
	// default/cache-3: replica-b, then replica-a
}
