package kvhistory

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	refused := func(client int, key, value string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: Input{Put: true, Key: key, Value: value}, Output: Output{Refused: true}, Call: call, Return: ret}
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
		{"refused write applied", []porcupine.Operation{refused(1, "k", "a", 0, 1), get(2, "k", "a", 2, 3)}, porcupine.Ok},
		{"refused write not applied", []porcupine.Operation{refused(1, "k", "a", 0, 1), get(2, "k", "", 2, 3)}, porcupine.Ok},
		{"refused write applied after it returned", []porcupine.Operation{
			refused(1, "k", "a", 0, 1), get(2, "k", "", 2, 3), get(2, "k", "a", 4, 5)}, porcupine.Illegal},
		{"keys are independent", []porcupine.Operation{put(1, "k", "a", 0, 1), get(2, "j", "", 2, 3), get(2, "k", "a", 4, 5)}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model, tc.ops); got != (tc.want == porcupine.Ok) {
				t.Errorf("linearizable = %v, want %v", got, tc.want == porcupine.Ok)
			}
		})
	}
}

// TestRecord: an acknowledged put is kept, a put of unknown outcome is
// kept open to the end, a NOSPACE refusal ends when it returned, and a
// failed get is left out.
func TestRecord(t *testing.T) {
	h := New()
	put := Input{Put: true, Key: "k", Value: "v"}
	h.record(1, put, Output{}, 0, 1, nil)
	h.record(1, put, Output{}, 2, 3, errors.New("context deadline exceeded"))
	h.record(2, put, Output{}, 4, 5, fmt.Errorf("put: %w", rpctypes.ErrNoSpace))
	h.record(3, Input{Key: "k"}, Output{}, 6, 7, errors.New("no leader"))
	s, _ := h.Check(time.Second)
	want := Summary{Operations: 3, Puts: 3, FailedPuts: 1, FailedGets: 1, RefusedPuts: 1, Result: porcupine.Ok}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if got := h.ops[1].Return; got != math.MaxInt64 {
		t.Errorf("the put of unknown outcome returns at %d, want never", got)
	}
	if got := h.ops[2]; got.Return != 5 || !got.Output.(Output).Refused {
		t.Errorf("the refused put is %+v, want one returning at 5, refused", got)
	}
}
