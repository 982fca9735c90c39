package kvhistory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Input is one operation a client of the etcd cluster issued: a put of
// a unique value, or a linearizable get.
type Input struct {
	Put        bool
	Key, Value string
}

// Output is what the operation returned: the value a get read, or for a
// put that Refused, that etcd answered NOSPACE.
type Output struct {
	Value string
	// Refused puts were applied before they returned, or not at all: the
	// put that crosses the quota is applied and answered NOSPACE, later
	// ones are not applied.
	Refused bool
}

// Model is a register per key: a put sets it, a get must read the
// latest value put. Histories are checked key by key (porcupine's
// partitions), which keeps the check fast.
var Model = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		in := input.(Input)
		out, _ := output.(Output) // nil for a put recorded without one
		switch {
		case in.Put && out.Refused:
			return []any{in.Value, state}
		case in.Put:
			return []any{in.Value}
		case out.Value == state.(string):
			return []any{state}
		}
		return nil
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in := input.(Input)
		if in.Put {
			if out, _ := output.(Output); out.Refused {
				return fmt.Sprintf("put(%s, %s) -> NOSPACE", in.Key, in.Value)
			}
			return fmt.Sprintf("put(%s, %s)", in.Key, in.Value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.Key, output.(Output).Value)
	},
}).ToModel()

// History records every operation of concurrent etcd clients, with the
// times of its call and return, for porcupine.
type History struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
	// failedPuts and failedGets are the operations that returned an
	// error, refusedPuts the puts etcd refused without applying them.
	failedPuts, failedGets, refusedPuts int
	nextClient                          int
}

// New returns an empty history whose clock starts now.
func New() *History {
	return &History{start: time.Now()}
}

func (h *History) now() int64 { return int64(time.Since(h.start)) }

// newClientID returns a client ID no operation used yet.
func (h *History) newClientID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextClient++
	return h.nextClient
}

// record adds one operation. A put whose outcome is unknown (it returned
// an error: it may or may not have been applied) gets a return time after
// every other operation, as porcupine expects; a refused put (Refused)
// took effect before it returned or never; a failed get read nothing and
// is left out.
func (h *History) record(client int, in Input, out Output, call, ret int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
	case in.Put && Refused(err):
		h.refusedPuts++
		out.Refused = true
	case in.Put:
		h.failedPuts++
		ret = math.MaxInt64
	default:
		h.failedGets++
		return
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Run issues operations on keys until ctx ends: puts of unique values and
// linearizable gets, each with its own timeout. After a put of unknown
// outcome the worker goes on as a new client, so that no client has two
// operations open at once.
func (h *History) Run(ctx context.Context, cli *clientv3.Client, keys []string) {
	client := h.newClientID()
	for seq := 0; ctx.Err() == nil; seq++ {
		in := Input{Key: keys[rand.IntN(len(keys))]}
		if rand.IntN(2) == 0 {
			in.Put, in.Value = true, fmt.Sprintf("c%d-%d", client, seq)
		}
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		call := h.now()
		var out Output
		var err error
		if in.Put {
			_, err = cli.Put(octx, in.Key, in.Value)
		} else {
			var resp *clientv3.GetResponse
			if resp, err = cli.Get(octx, in.Key); err == nil && len(resp.Kvs) > 0 {
				out.Value = string(resp.Kvs[0].Value)
			}
		}
		ret := h.now()
		cancel()
		if ctx.Err() != nil && err != nil {
			// Cut short by the end of the run, not by the cluster.
			if in.Put {
				h.record(client, in, out, call, ret, err)
			}
			return
		}
		h.record(client, in, out, call, ret, err)
		if err != nil {
			if in.Put && !Refused(err) {
				client = h.newClientID()
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Summary is what Check reports: how many operations the history holds
// and porcupine's verdict.
type Summary struct {
	Operations, Puts, Gets, FailedPuts, FailedGets int
	// RefusedPuts are the puts etcd answered NOSPACE (Refused).
	RefusedPuts int
	Result      porcupine.CheckResult
}

func (s Summary) String() string {
	return fmt.Sprintf("%d operations recorded (%d puts acknowledged or unknown, %d gets), %d puts and %d gets failed, %d puts refused; linearizability: %s",
		s.Operations, s.Puts, s.Gets, s.FailedPuts, s.FailedGets, s.RefusedPuts, s.Result)
}

// Refused reports whether err is NOSPACE: etcd returns it before
// proposing a put, when applying one under the alarm (neither writes
// anything), and for the put that crosses the quota, which it applies.
func Refused(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace)
}

// Check runs porcupine on the history, final reads included, and returns
// its summary and what porcupine found, for a visualization on failure.
func (h *History) Check(timeout time.Duration) (Summary, porcupine.LinearizationInfo) {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	s := Summary{Operations: len(ops), FailedPuts: h.failedPuts, FailedGets: h.failedGets, RefusedPuts: h.refusedPuts}
	h.mu.Unlock()
	for _, op := range ops {
		if op.Input.(Input).Put {
			s.Puts++
		} else {
			s.Gets++
		}
	}
	var info porcupine.LinearizationInfo
	s.Result, info = porcupine.CheckOperationsVerbose(Model, ops, timeout)
	return s, info
}

// FinalReads reads every key once more, recorded like any other get, and
// fails when a key's value is not a put the history holds.
func (h *History) FinalReads(ctx context.Context, cli *clientv3.Client, keys []string) error {
	client := h.newClientID()
	var errs []error
	for _, k := range keys {
		call := h.now()
		resp, err := cli.Get(ctx, k)
		ret := h.now()
		if err != nil {
			return fmt.Errorf("final read of %s: %w", k, err)
		}
		var out Output
		if len(resp.Kvs) > 0 {
			out.Value = string(resp.Kvs[0].Value)
		}
		h.record(client, Input{Key: k}, out, call, ret, nil)
		h.mu.Lock()
		written := out.Value == "" || h.putIssued(k, out.Value)
		h.mu.Unlock()
		if !written {
			errs = append(errs, fmt.Errorf("key %s holds %q, which no client put", k, out.Value))
		}
	}
	return errors.Join(errs...)
}

// putIssued reports whether a put of value to key is in the history.
// Call with h.mu held.
func (h *History) putIssued(key, value string) bool {
	for _, op := range h.ops {
		if in := op.Input.(Input); in.Put && in.Key == key && in.Value == value {
			return true
		}
	}
	return false
}
