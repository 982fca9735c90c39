package ownership_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/ownership"
)

func TestFinalizersRegister(t *testing.T) {
	noop := func(context.Context, client.Object) error { return nil }
	tests := []struct {
		name      string
		names     []string
		fn        ownership.CleanupFunc
		wantErrAt int // index of the first failing Register, -1 for none
		wantMsg   string
		wantNames []string
	}{
		{name: "unique names keep registration order", names: []string{"dns", "bucket", "lease"}, fn: noop, wantErrAt: -1, wantNames: []string{"dns", "bucket", "lease"}},
		{name: "empty name", names: []string{"dns", ""}, fn: noop, wantErrAt: 1, wantMsg: "name is empty", wantNames: []string{"dns"}},
		{name: "duplicate name", names: []string{"dns", "bucket", "dns"}, fn: noop, wantErrAt: 2, wantMsg: `"dns": name is already registered`, wantNames: []string{"dns", "bucket"}},
		{name: "nil function", names: []string{"dns"}, fn: nil, wantErrAt: 0, wantMsg: "function is nil", wantNames: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f ownership.Finalizers // zero value is usable
			for i, n := range tc.names {
				err := f.Register(n, tc.fn)
				if i != tc.wantErrAt {
					if err != nil {
						t.Fatalf("Register(%q) error = %v", n, err)
					}
					continue
				}
				if !errors.Is(err, ownership.ErrInvalidStep) || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("Register(%q) error = %v, want ErrInvalidStep mentioning %q", n, err, tc.wantMsg)
				}
				break
			}
			if diff := cmp.Diff(tc.wantNames, f.Names()); diff != "" {
				t.Errorf("Names() (-want +got):\n%s", diff)
			}
		})
	}
}

var (
	errDNS    = errors.New("dns api down")
	errBucket = errors.New("bucket not empty")
)

func TestFinalizersRun(t *testing.T) {
	type step struct {
		name string
		err  error
	}
	tests := []struct {
		name     string
		steps    []step
		wantRan  []string
		wantErrs []error  // each must be found with errors.Is
		wantMsg  []string // the joined message's lines, in order
		wantStep string   // the step errors.As finds first
	}{
		{name: "no steps", wantRan: nil},
		{name: "all succeed in order", steps: []step{{"a", nil}, {"b", nil}, {"c", nil}}, wantRan: []string{"a", "b", "c"}},
		{
			name:     "a failure does not stop later steps",
			steps:    []step{{"dns", errDNS}, {"lease", nil}},
			wantRan:  []string{"dns", "lease"},
			wantErrs: []error{errDNS},
			wantMsg:  []string{`cleanup step "dns": dns api down`},
			wantStep: "dns",
		},
		{
			name:     "failures are aggregated with their step names",
			steps:    []step{{"dns", errDNS}, {"lease", nil}, {"bucket", errBucket}},
			wantRan:  []string{"dns", "lease", "bucket"},
			wantErrs: []error{errDNS, errBucket},
			wantMsg:  []string{`cleanup step "dns": dns api down`, `cleanup step "bucket": bucket not empty`},
			wantStep: "dns",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ownership.NewFinalizers()
			var ran []string
			for _, s := range tc.steps {
				err := f.Register(s.name, func(_ context.Context, obj client.Object) error {
					if obj.GetName() != "target" {
						t.Errorf("step %s got object %q", s.name, obj.GetName())
					}
					ran = append(ran, s.name)
					return s.err
				})
				if err != nil {
					t.Fatalf("Register(%q) error = %v", s.name, err)
				}
			}
			obj := &corev1.ConfigMap{}
			obj.Name = "target"
			err := f.Run(t.Context(), obj)
			if diff := cmp.Diff(tc.wantRan, ran); diff != "" {
				t.Errorf("steps run (-want +got):\n%s", diff)
			}
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Run() error = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Run() error = nil, want %v", tc.wantErrs)
			}
			for _, want := range tc.wantErrs {
				if !errors.Is(err, want) {
					t.Errorf("Run() error %q does not wrap %v", err, want)
				}
			}
			if diff := cmp.Diff(strings.Join(tc.wantMsg, "\n"), err.Error()); diff != "" {
				t.Errorf("Run() message (-want +got):\n%s", diff)
			}
			var se *ownership.StepError
			if !errors.As(err, &se) || se.Step != tc.wantStep {
				t.Errorf("errors.As(*StepError) = %+v, want the first failed step", se)
			}
		})
	}
}

func TestFinalizersRunStopsOnDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := ownership.NewFinalizers()
	var ran []string
	for _, name := range []string{"first", "second", "third"} {
		if err := f.Register(name, func(context.Context, client.Object) error {
			ran = append(ran, name)
			if name == "first" {
				cancel()
			}
			return nil
		}); err != nil {
			t.Fatalf("Register(%q) error = %v", name, err)
		}
	}
	err := f.Run(ctx, &corev1.ConfigMap{})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `["second" "third"]`) {
		t.Errorf("Run() error = %v, want context.Canceled naming the skipped steps", err)
	}
	if diff := cmp.Diff([]string{"first"}, ran); diff != "" {
		t.Errorf("steps run (-want +got):\n%s", diff)
	}
}

func TestFinalizersConcurrentUse(t *testing.T) {
	f := ownership.NewFinalizers()
	if err := f.Register("base", func(context.Context, client.Object) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			_ = f.Register(strings.Repeat("x", i+1), func(context.Context, client.Object) error { return nil })
		})
		wg.Go(func() {
			if err := f.Run(t.Context(), &corev1.ConfigMap{}); err != nil {
				t.Errorf("Run() error = %v", err)
			}
		})
	}
	wg.Wait()
	if got := len(f.Names()); got != 5 {
		t.Errorf("len(Names()) = %d, want 5", got)
	}
}
