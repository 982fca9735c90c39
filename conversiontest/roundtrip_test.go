package conversiontest_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/opkit-dev/opkit/conversiontest"
)

// newThing is the hub: size was renamed replicas, and zone is new.
type newThing struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Replicas int32
	Zone     string
}

func (t *newThing) DeepCopyObject() runtime.Object { c := *t; return &c }
func (*newThing) Hub()                             {}

// oldThing is the spoke. It carries zone in an annotation, as a lossless
// conversion must; unless lossless is set, zone is lost.
type oldThing struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Size int32
}

func (t *oldThing) DeepCopyObject() runtime.Object { c := *t; return &c }

const zoneAnnotation = "example.com/zone"

func (t *oldThing) ConvertTo(dst conversion.Hub) error {
	h := dst.(*newThing)
	h.ObjectMeta = *t.DeepCopy()
	h.Replicas = t.Size
	if z, ok := h.Annotations[zoneAnnotation]; ok {
		h.Zone = z
		delete(h.Annotations, zoneAnnotation)
		if len(h.Annotations) == 0 {
			h.Annotations = nil
		}
	}
	return nil
}

func (t *oldThing) ConvertFrom(src conversion.Hub) error {
	h := src.(*newThing)
	t.ObjectMeta = *h.DeepCopy()
	t.Size = h.Replicas
	if h.Zone != "" && lossless {
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[zoneAnnotation] = h.Zone
	}
	return nil
}

var lossless = true

// fatal records what RoundTrip reports instead of stopping the test.
type fatal struct {
	testing.TB
	msgs []string
}

func (f *fatal) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}
func (f *fatal) Helper() {}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		lossless bool
		want     string // in the first failure; empty: none
	}{
		{name: "lossless", lossless: true},
		{name: "the spoke drops the hub's new field", lossless: false, want: "*conversiontest_test.newThing -> *conversiontest_test.oldThing -> back lost data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lossless = tt.lossless
			f := &fatal{TB: t}
			conversiontest.RoundTrip(f, &newThing{}, &oldThing{}, conversiontest.WithIterations(200), conversiontest.WithSeed(1))
			switch {
			case tt.want == "" && len(f.msgs) > 0:
				t.Errorf("RoundTrip failed: %s", f.msgs[0])
			case tt.want != "" && (len(f.msgs) == 0 || !strings.Contains(f.msgs[0], tt.want)):
				t.Errorf("RoundTrip failures %q, want one with %q", f.msgs, tt.want)
			case tt.want != "" && !strings.Contains(f.msgs[0], "seed 1,"):
				t.Errorf("the failure %q does not name the seed", f.msgs[0])
			}
		})
	}
}
