package kvhistory

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModel: the checker the etcd suite relies on refuses a history that
// loses an acknowledged write or reads a value out of order, and accepts a
// put of unknown outcome either way.
func TestModel(t *testing.T) {
	put := func(client int, key, value string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: Input{Put: true, Key: key, Value: value}, Call: call, Return: ret}
	}
	get := func(client int, key, value string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: Input{Key: key}, Output: Output{Value: value}, Call: call, Return: ret}
	}
	const never = 1 << 62
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"read of the acknowledged write", []porcupine.Operation{put(1, "k", "a", 0, 1), get(2, "k", "a", 2, 3)}, porcupine.Ok},
		{"acknowledged write lost", []porcupine.Operation{put(1, "k", "a", 0, 1), get(2, "k", "", 2, 3)}, porcupine.Illegal},
		{"stale read after a newer write", []porcupine.Operation{put(1, "k", "a", 0, 1), put(1, "k", "b", 2, 3), get(2, "k", "a", 4, 5)}, porcupine.Illegal},
		{"concurrent write may be seen or not", []porcupine.Operation{put(1, "k", "a", 0, 10), get(2, "k", "", 1, 2), get(3, "k", "a", 3, 4)}, porcupine.Ok},
		{"unknown write applied", []porcupine.Operation{put(1, "k", "a", 0, never), get(2, "k", "a", 5, 6)}, porcupine.Ok},
		{"unknown write not applied", []porcupine.Operation{put(1, "k", "a", 0, never), get(2, "k", "", 5, 6)}, porcupine.Ok},
		{"keys are independent", []porcupine.Operation{put(1, "k", "a", 0, 1), get(2, "j", "", 2, 3), get(2, "k", "a", 4, 5)}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model, tc.ops); got != (tc.want == porcupine.Ok) {
				t.Errorf("linearizable = %v, want %v", got, tc.want == porcupine.Ok)
			}
		})
	}
}
