package reconcile

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
)

// TestRecordsReleaseTheirMaps: once the last record of a create of
// thousands is dropped, no map keeps the storage of its largest size.
func TestRecordsReleaseTheirMaps(t *testing.T) {
	const n = 1000
	widget := func(i int, rv string) *testv1.Widget {
		return &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("w", i), UID: types.UID(fmt.Sprint("uid", i)), ResourceVersion: rv}}
	}
	key := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("w", i)}
	}

	var w ownWrites
	for i := range n {
		w.record(key(i), widget(i, "2"), "1", []string{"1"})
	}
	for i := range n {
		w.seen(key(i), widget(i, "2"))
	}
	if w.m != nil {
		t.Errorf("ownWrites: a map of %d records is kept after all were seen", len(w.m))
	}

	var a appliedChildren
	ck := func(i int) childKey { return childKey{key: key(i)} }
	for i := range n {
		a.recordCreate(ck(i), widget(i, "1").GetUID(), "d", widget(i, "1"))
	}
	for i := range n {
		a.seen(ck(i), widget(i, "1"))
	}
	if a.m != nil {
		t.Errorf("appliedChildren: a map of %d records is kept after all were seen", len(a.m))
	}

	var p progressDeferrals
	for i := range n {
		p.remaining(key(i), "uid", 1, time.Minute, time.Now())
	}
	for i := range n {
		p.forget(key(i))
	}
	if p.m != nil {
		t.Errorf("progressDeferrals: a map of %d records is kept after all were forgotten", len(p.m))
	}
}
