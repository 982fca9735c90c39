package conversiontest

import (
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	"sigs.k8s.io/randfill"
)

// Option configures RoundTrip.
type Option func(*options)

type options struct {
	iterations int
	seed       int64
	funcs      []any
}

// WithIterations converts n random objects each way (default 1000).
func WithIterations(n int) Option { return func(o *options) { o.iterations = n } }

// WithSeed fills the objects from seed, such as the one a failure printed
// (default: the time).
func WithSeed(seed int64) Option { return func(o *options) { o.seed = seed } }

// WithFillFuncs adds randfill custom fill functions, such as
// func(*MySpec, randfill.Continue), for values the API cannot hold (a
// field a version validates to a few values).
func WithFillFuncs(funcs ...any) Option {
	return func(o *options) { o.funcs = append(o.funcs, funcs...) }
}

// RoundTrip fails t unless spoke -> hub -> spoke and hub -> spoke -> hub
// each give back the randomly filled object, by apimachinery's semantic
// equality. hub and spoke are pointers to the two versions' kinds; their
// values are not used. TypeMeta is ignored: the conversion webhook sets it.
func RoundTrip(t testing.TB, hub conversion.Hub, spoke conversion.Convertible, opts ...Option) {
	t.Helper()
	o := options{iterations: 1000, seed: time.Now().UnixNano()}
	for _, opt := range opts {
		opt(&o)
	}
	fill := randfill.New().NilChance(0.2).NumElements(0, 3).RandSource(rand.NewSource(o.seed)).Funcs(o.funcs...)
	for i := range o.iterations {
		s := fresh(spoke)
		fill.Fill(s)
		clearTypeMeta(s)
		h := fresh(hub)
		if err := s.ConvertTo(h); err != nil {
			t.Fatalf("seed %d, iteration %d: %T.ConvertTo: %v", o.seed, i, s, err)
		}
		back := fresh(spoke)
		if err := back.ConvertFrom(h); err != nil {
			t.Fatalf("seed %d, iteration %d: %T.ConvertFrom: %v", o.seed, i, back, err)
		}
		if !equal(s, back) {
			t.Fatalf("seed %d, iteration %d: %T -> %T -> back lost data (-before +after):\n%s", o.seed, i, s, h, cmp.Diff(s, back))
		}

		h = fresh(hub)
		fill.Fill(h)
		clearTypeMeta(h)
		s = fresh(spoke)
		if err := s.ConvertFrom(h); err != nil {
			t.Fatalf("seed %d, iteration %d: %T.ConvertFrom: %v", o.seed, i, s, err)
		}
		hubBack := fresh(hub)
		if err := s.ConvertTo(hubBack); err != nil {
			t.Fatalf("seed %d, iteration %d: %T.ConvertTo: %v", o.seed, i, s, err)
		}
		if !equal(h, hubBack) {
			t.Fatalf("seed %d, iteration %d: %T -> %T -> back lost data (-before +after):\n%s", o.seed, i, h, s, cmp.Diff(h, hubBack))
		}
	}
}

// fresh returns a new zero value of obj's type.
func fresh[T runtime.Object](obj T) T {
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
}

func clearTypeMeta(obj runtime.Object) {
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
}

func equal(a, b runtime.Object) bool {
	clearTypeMeta(b)
	return equality.Semantic.DeepEqual(a, b)
}
