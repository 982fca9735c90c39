package shard_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/shard"
)

// Every replica computes the same slot from an object's name; which
// member holds a slot changes, the slot does not.
func ExampleRing_Slot() {
	r := shard.Ring{Name: "memcached"}
	for _, name := range []string{"cache-1", "cache-2", "cache-3"} {
		fmt.Printf("%s: %s=%d\n", name, r.SlotLabel(), r.Slot(types.NamespacedName{Namespace: "default", Name: name}))
	}
	// Output:
	// cache-1: slot.shard.opkit.dev/memcached=45
	// cache-2: slot.shard.opkit.dev/memcached=52
	// cache-3: slot.shard.opkit.dev/memcached=7
}

// The webhook's path and the label its configuration's objectSelector
// requires absent, for an installer's MutatingWebhookConfiguration.
func ExampleRing_WebhookPath() {
	r := shard.Ring{Name: "memcached"}
	fmt.Println(r.WebhookPath())
	fmt.Println(r.SlotLabel(), "DoesNotExist")
	// Output:
	// /label-slot-memcached
	// slot.shard.opkit.dev/memcached DoesNotExist
}
