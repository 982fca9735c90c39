package statusutil_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/statusutil"
)

func printConditions(obj statusutil.Getter) {
	for _, c := range obj.GetConditions() {
		fmt.Printf("%s=%s %s %q (generation %d)\n", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
}

// ensureChildren stands in for the work of a reconcile pass.
func ensureChildren(*testv1.Widget) error { return nil }

// A reconcile pass: mark progress, record the outcome of the work, derive
// Ready and only write the status when something changed.
func Example() {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 2}}

	changed := statusutil.MarkReconciling(w, "Progressing", "creating children")
	if err := ensureChildren(w); err != nil {
		changed = statusutil.MarkFalse(w, "ChildrenReady", "CreateFailed", err.Error()) || changed
	} else {
		changed = statusutil.MarkTrue(w, "ChildrenReady", "Created", "3 children") || changed
		changed = statusutil.ClearReconciling(w) || changed
	}
	changed = statusutil.SetSummary(w, statusutil.WithConditions("ChildrenReady")) || changed
	changed = statusutil.SetObservedGeneration(w) || changed

	fmt.Println("write status:", changed)
	printConditions(w)
	// Output:
	// write status: true
	// Ready=True Succeeded "" (generation 2)
	// ChildrenReady=True Created "3 children" (generation 2)
}

// Set reports whether anything changed, so that a controller can skip a
// status write that would change nothing. A new reason or message is a
// change, but does not move LastTransitionTime.
func ExampleSet() {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 1}}
	at := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 750_000_000, time.UTC))

	fmt.Println(statusutil.Set(w, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Up", LastTransitionTime: at}))
	fmt.Println(statusutil.Set(w, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Up"}))
	fmt.Println(statusutil.Set(w, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "StillUp"}))
	fmt.Println(statusutil.Get(w, "Available").LastTransitionTime.UTC())
	// Output:
	// true
	// false
	// true
	// 2026-03-01 12:00:00 +0000 UTC
}

// SetSummary applies its precedence rules: Stalled first, then a failed
// owned condition, then Reconciling, then an undecided owned condition.
func ExampleSetSummary() {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 1}}
	opts := []statusutil.SummaryOption{
		statusutil.WithConditions("Available"),
		statusutil.WithNegativePolarityConditions("Degraded"),
	}
	ready := func() {
		statusutil.SetSummary(w, opts...)
		c := statusutil.Get(w, statusutil.ConditionReady)
		fmt.Println(c.Status, c.Reason)
	}

	statusutil.MarkReconciling(w, "Progressing", "rolling out")
	ready()
	statusutil.MarkTrue(w, "Available", "Up", "")
	statusutil.MarkTrue(w, "Degraded", "OneReplicaDown", "1 of 3 replicas down")
	ready()
	statusutil.MarkFalse(w, "Degraded", "AllReplicasUp", "")
	ready()
	statusutil.ClearReconciling(w)
	ready()
	// Output:
	// Unknown Progressing
	// False OneReplicaDown
	// Unknown Progressing
	// True Succeeded
}

// A controller that cannot make progress without outside help marks the
// object Stalled; this removes Reconciling, and Ready becomes False.
func ExampleMarkStalled() {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 1}}
	statusutil.MarkReconciling(w, "Progressing", "")
	statusutil.MarkStalled(w, "SecretNotFound", `secret "db" not found`)
	statusutil.SetSummary(w)
	printConditions(w)
	// Output:
	// Ready=False SecretNotFound "secret \"db\" not found" (generation 1)
	// Stalled=True SecretNotFound "secret \"db\" not found" (generation 1)
}

// Reasons built from dynamic data are made acceptable to the API server; an
// empty one becomes "Unspecified".
func ExampleSanitizeReason() {
	fmt.Println(statusutil.SanitizeReason("ImagePullBackOff"))
	fmt.Println(statusutil.SanitizeReason("not found: 404"))
	fmt.Println(statusutil.SanitizeReason(""))
	// Output:
	// ImagePullBackOff
	// notfound:404
	// Unspecified
}

// Long messages, such as aggregated errors, are cut to MaxMessageLength.
func ExampleMarkFalse() {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 1}}
	err := errors.New("validation failed: " + strings.Repeat("field is invalid; ", 200))
	statusutil.MarkFalse(w, "Valid", "ValidationFailed", err.Error())
	msg := statusutil.Get(w, "Valid").Message
	fmt.Println(len(msg) <= statusutil.MaxMessageLength, strings.HasSuffix(msg, statusutil.TruncationMarker))
	// Output:
	// true true
}

// Validate catches, in a unit test, a condition that the API server would
// reject.
func ExampleValidate() {
	err := statusutil.Validate(metav1.Condition{Type: "has spaces", Status: "Yes", Reason: "Ok", LastTransitionTime: metav1.Now()})
	fmt.Println(err != nil)
	// Output:
	// true
}

// status.observedGeneration records the spec generation a completed pass
// acted on.
func ExampleSetObservedGeneration() {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 4}}
	fmt.Println(statusutil.IsObservedGenerationCurrent(w))
	fmt.Println(statusutil.SetObservedGeneration(w), w.Status.ObservedGeneration)
	fmt.Println(statusutil.IsObservedGenerationCurrent(w))
	// Output:
	// false
	// true 4
	// true
}
