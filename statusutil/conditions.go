package statusutil

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Condition types with a meaning shared by every opkit operator. They follow
// the kstatus conventions of sigs.k8s.io/cli-utils: Ready is a normal-true
// summary ("True" is good); Reconciling and Stalled are abnormal-true
// conditions that are present only while they are True.
const (
	// ConditionReady summarises the object: True when the last pass for the
	// current generation succeeded and every owned condition is good. See
	// SetSummary.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the controller is working towards the
	// desired state (for example, after a spec change or while waiting on a
	// child). It is removed, not set to False, when the work is done.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the controller cannot make progress without
	// outside help (for example, invalid spec or a missing Secret). It is
	// removed, not set to False, when the problem goes away.
	ConditionStalled = "Stalled"
)

// Reasons that statusutil writes itself.
const (
	// ReasonUnspecified replaces a reason that is empty, or that contains no
	// character the API accepts. See SanitizeReason.
	ReasonUnspecified = "Unspecified"
	// ReasonSucceeded is the reason SetSummary gives a True Ready condition
	// unless WithReadyReason says otherwise.
	ReasonSucceeded = "Succeeded"
	// ReasonConditionMissing is the reason SetSummary gives an Unknown Ready
	// condition when an owned positive-polarity condition has not been
	// reported yet.
	ReasonConditionMissing = "ConditionMissing"
)

// MaxMessageLength is the largest condition message, in bytes, that Set
// writes. Longer messages are cut at a UTF-8 character boundary and end with
// TruncationMarker, so the result is never longer than MaxMessageLength.
//
// The API server allows 32768 bytes per message, but a condition message is
// meant to be read by a person in `kubectl describe` or `kubectl get -o yaml`,
// every condition is resent on each status write, and messages built from
// errors (aggregated validation errors, HTTP bodies) can be huge. 1024 bytes
// keeps several conditions well inside a small status while still fitting
// any error a human will read to the end. Put the full error in an Event or a
// log line when it matters.
const MaxMessageLength = 1024

// TruncationMarker ends a message that Set shortened to MaxMessageLength.
const TruncationMarker = "... [truncated]"

// maxReasonLength is the API server's bound on a condition reason.
const maxReasonLength = 1024

// Getter is an object whose status has a list of metav1.Condition.
//
// Generated API types usually satisfy it with two one-line methods:
//
//	func (w *Widget) GetConditions() []metav1.Condition  { return w.Status.Conditions }
//	func (w *Widget) SetConditions(c []metav1.Condition) { w.Status.Conditions = c }
type Getter interface {
	client.Object
	// GetConditions returns the object's conditions. Callers must not modify
	// the returned slice.
	GetConditions() []metav1.Condition
}

// Setter is a Getter whose conditions can be replaced.
type Setter interface {
	Getter
	// SetConditions replaces the object's conditions with the given slice.
	SetConditions([]metav1.Condition)
}

// Set sets condition c on obj and reports whether obj's conditions changed.
// When changed is false, nothing was written to obj and the caller can skip
// the API write.
//
// Set normalises c before storing it:
//
//   - ObservedGeneration is always obj.GetGeneration(); the value in c is
//     ignored.
//   - Reason goes through SanitizeReason, so the API server never rejects it
//     (an empty reason becomes ReasonUnspecified).
//   - Message is made valid UTF-8 (invalid bytes become U+FFFD, as JSON
//     encoding would do anyway) and cut to MaxMessageLength bytes, ending
//     with TruncationMarker.
//   - LastTransitionTime is kept from the existing condition of the same type
//     when the Status is unchanged, whatever c says: a new reason or message
//     is not a transition. When the Status changes (or the condition is new),
//     c.LastTransitionTime is used, or the current time when it is zero,
//     truncated to whole seconds (a time that truncates to the zero time
//     counts as zero). metav1.Time serialises with second
//     precision, so a truncated time is identical in memory and after a round
//     trip through the API server, and comparing the two gives no spurious
//     diff.
//
// Two conditions are the same when Type, Status, Reason, Message and
// ObservedGeneration match after normalisation; setting the same condition
// again returns false and leaves the slice, including its order, untouched.
//
// When Set writes, it builds a new slice (it never modifies the backing array
// returned by GetConditions), keeps at most one condition per type (the first
// one, if the slice held duplicates; duplicates count as a change), and sorts
// it: ConditionReady first, then the other types in byte-wise ascending
// order. The order is therefore the same whatever order conditions were set
// in. Set does not reorder a slice when nothing else changes, so two writers
// that sort differently do not undo each other forever.
//
// Set uses k8s.io/apimachinery/pkg/api/meta to find conditions but not
// meta.SetStatusCondition, which stores times with sub-second precision,
// neither bounds nor validates anything, and appends in insertion order.
//
// Type and Status are not checked: they are normally constants in the
// caller's code. A type that is empty or badly formed, or a status other than
// True, False or Unknown, is stored as given and the API server rejects the
// write naming the field. Check them in a unit test with Validate.
func Set(obj Setter, c metav1.Condition) (changed bool) {
	c.ObservedGeneration = obj.GetGeneration()
	c.Reason = SanitizeReason(c.Reason)
	c.Message = boundMessage(c.Message)
	c.LastTransitionTime = truncateTime(c.LastTransitionTime)
	conds := obj.GetConditions()
	dup := hasDuplicateTypes(conds)
	if old := meta.FindStatusCondition(conds, c.Type); old != nil && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = now()
	}
	if old := meta.FindStatusCondition(conds, c.Type); old != nil && !dup && same(*old, c) {
		return false
	}

	out := make([]metav1.Condition, 0, len(conds)+1)
	seen := make(map[string]bool, len(conds)+1)
	seen[c.Type] = true
	for _, o := range conds {
		if seen[o.Type] {
			continue
		}
		seen[o.Type] = true
		out = append(out, o)
	}
	out = append(out, c)
	sortConditions(out)
	obj.SetConditions(out)
	return true
}

// MarkTrue sets condition condType to True with the given reason and message.
// It is Set with the current time as the candidate LastTransitionTime.
func MarkTrue(obj Setter, condType, reason, message string) (changed bool) {
	return mark(obj, condType, metav1.ConditionTrue, reason, message)
}

// MarkFalse sets condition condType to False with the given reason and
// message. It is Set with the current time as the candidate
// LastTransitionTime.
func MarkFalse(obj Setter, condType, reason, message string) (changed bool) {
	return mark(obj, condType, metav1.ConditionFalse, reason, message)
}

// MarkUnknown sets condition condType to Unknown with the given reason and
// message. It is Set with the current time as the candidate
// LastTransitionTime.
func MarkUnknown(obj Setter, condType, reason, message string) (changed bool) {
	return mark(obj, condType, metav1.ConditionUnknown, reason, message)
}

func mark(obj Setter, condType string, status metav1.ConditionStatus, reason, message string) bool {
	return Set(obj, metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message})
}

// Get returns a copy of condition condType, or nil when obj does not have
// it. Changing the copy does not change obj; use Set for that.
func Get(obj Getter, condType string) *metav1.Condition {
	c := meta.FindStatusCondition(obj.GetConditions(), condType)
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}

// IsTrue reports whether condition condType is present with status True.
func IsTrue(obj Getter, condType string) bool {
	return meta.IsStatusConditionTrue(obj.GetConditions(), condType)
}

// IsFalse reports whether condition condType is present with status False.
// An absent condition is not False: for kstatus-style abnormal-true
// conditions such as Stalled, use !IsTrue instead.
func IsFalse(obj Getter, condType string) bool {
	return meta.IsStatusConditionFalse(obj.GetConditions(), condType)
}

// IsUnknown reports whether condition condType is neither True nor False:
// its status is Unknown (or not a valid status), or obj does not have it.
func IsUnknown(obj Getter, condType string) bool {
	return !IsTrue(obj, condType) && !IsFalse(obj, condType)
}

// IsCurrent reports whether condition condType is present and was written
// for obj's current generation (its ObservedGeneration is at least
// metadata.generation). A condition that is not current describes an older
// spec.
func IsCurrent(obj Getter, condType string) bool {
	c := meta.FindStatusCondition(obj.GetConditions(), condType)
	return c != nil && c.ObservedGeneration >= obj.GetGeneration()
}

// Remove removes condition condType from obj and reports whether it was
// there. It builds a new slice and keeps the order of the others.
func Remove(obj Setter, condType string) (changed bool) {
	conds := obj.GetConditions()
	if meta.FindStatusCondition(conds, condType) == nil {
		return false
	}
	out := make([]metav1.Condition, 0, len(conds)-1)
	for _, c := range conds {
		if c.Type != condType {
			out = append(out, c)
		}
	}
	obj.SetConditions(out)
	return true
}

// SanitizeReason returns reason in a form the API server accepts: a string of
// 1 to 1024 characters matching ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$.
// A valid reason is returned unchanged. Otherwise characters outside
// [A-Za-z0-9_,:] are dropped ("Not Ready" becomes "NotReady"), leading
// characters up to the first letter and trailing ',' and ':' are trimmed, and
// the result is cut to 1024 bytes. When nothing is left, it returns
// ReasonUnspecified.
//
// Set applies it so that a reason built from dynamic data never makes a
// whole status write fail. Reasons should still be CamelCase constants:
// the rewriting is a safety net, not a formatting tool.
func SanitizeReason(reason string) string {
	if validReason(reason) {
		return reason
	}
	b := make([]byte, 0, min(len(reason), maxReasonLength))
	for i := 0; i < len(reason) && len(b) < maxReasonLength; i++ {
		ch := reason[i]
		switch {
		case isLetter(ch):
			b = append(b, ch)
		case len(b) == 0:
			// The first character must be a letter.
		case isDigit(ch) || ch == '_' || ch == ',' || ch == ':':
			b = append(b, ch)
		}
	}
	s := strings.TrimRight(string(b), ",:")
	if s == "" {
		return ReasonUnspecified
	}
	return s
}

func validReason(r string) bool {
	if r == "" || len(r) > maxReasonLength || !isLetter(r[0]) {
		return false
	}
	for i := 1; i < len(r); i++ {
		ch := r[i]
		if !isLetter(ch) && !isDigit(ch) && ch != '_' && ch != ',' && ch != ':' {
			return false
		}
	}
	last := r[len(r)-1]
	return last != ',' && last != ':'
}

func isLetter(ch byte) bool { return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' }
func isDigit(ch byte) bool  { return ch >= '0' && ch <= '9' }

// Validate checks c against the rules the API server applies to a
// metav1.Condition (type format, status value, reason format and length,
// message length, non-negative observedGeneration, non-zero
// lastTransitionTime). It returns nil for a valid condition and otherwise an
// error naming each bad field. Use it in unit tests to catch a condition the
// API server would reject; Set does not call it.
func Validate(c metav1.Condition) error {
	if errs := metav1validation.ValidateCondition(c, field.NewPath("condition")); len(errs) > 0 {
		return fmt.Errorf("invalid condition %q: %w", c.Type, errs.ToAggregate())
	}
	return nil
}

// ValidateConditions checks obj's conditions with Validate and also rejects
// two conditions of the same type. The field paths in the error are
// relative to the conditions slice.
func ValidateConditions(obj Getter) error {
	if errs := metav1validation.ValidateConditions(obj.GetConditions(), field.NewPath("conditions")); len(errs) > 0 {
		return fmt.Errorf("invalid conditions on %s: %w", client.ObjectKeyFromObject(obj), errs.ToAggregate())
	}
	return nil
}

// boundMessage makes m valid UTF-8 and at most MaxMessageLength bytes.
func boundMessage(m string) string {
	m = strings.ToValidUTF8(m, "\uFFFD")
	if len(m) <= MaxMessageLength {
		return m
	}
	cut := MaxMessageLength - len(TruncationMarker)
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut] + TruncationMarker
}

// now returns the current time at the precision metav1.Time serialises.
func now() metav1.Time { return truncateTime(metav1.Now()) }

// truncateTime drops sub-second precision and the monotonic clock reading,
// and uses the local zone, as decoding a metav1.Time from JSON does, so that
// the result is identical to its round-tripped self.
func truncateTime(t metav1.Time) metav1.Time {
	if t.IsZero() {
		return t
	}
	return metav1.NewTime(t.Truncate(time.Second).Local())
}

func same(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason &&
		a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration &&
		a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

func hasDuplicateTypes(conds []metav1.Condition) bool {
	seen := make(map[string]bool, len(conds))
	for _, c := range conds {
		if seen[c.Type] {
			return true
		}
		seen[c.Type] = true
	}
	return false
}

// sortConditions orders conditions Ready first, then by type.
func sortConditions(conds []metav1.Condition) {
	slices.SortStableFunc(conds, func(a, b metav1.Condition) int {
		switch {
		case a.Type == b.Type:
			return 0
		case a.Type == ConditionReady:
			return -1
		case b.Type == ConditionReady:
			return 1
		default:
			return strings.Compare(a.Type, b.Type)
		}
	})
}
