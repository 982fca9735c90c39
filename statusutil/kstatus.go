package statusutil

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MarkReconciling sets Reconciling=True with the given reason and message and
// removes Stalled, and reports whether obj's conditions changed.
//
// kstatus reads Reconciling=True as "in progress" and Stalled=True as
// "failed"; an object cannot be both, and a stale Stalled left over from an
// earlier generation would hide the new attempt, so marking one clears the
// other.
func MarkReconciling(obj Setter, reason, message string) bool {
	removed := Remove(obj, ConditionStalled)
	return MarkTrue(obj, ConditionReconciling, reason, message) || removed
}

// MarkStalled sets Stalled=True with the given reason and message and removes
// Reconciling, and reports whether obj's conditions changed. Use it when the
// controller cannot make progress until something outside it changes (an
// invalid spec, a missing referenced object); for errors that a retry may
// fix, return the error and let the work queue back off instead.
func MarkStalled(obj Setter, reason, message string) bool {
	removed := Remove(obj, ConditionReconciling)
	return MarkTrue(obj, ConditionStalled, reason, message) || removed
}

// ClearReconciling removes the Reconciling condition and reports whether it
// was present. kstatus conditions are abnormal-true: when the work is done,
// the condition goes away rather than turning False.
func ClearReconciling(obj Setter) bool { return Remove(obj, ConditionReconciling) }

// ClearStalled removes the Stalled condition and reports whether it was
// present.
func ClearStalled(obj Setter) bool { return Remove(obj, ConditionStalled) }

// SummaryOption configures SetSummary.
type SummaryOption func(*summaryOptions)

type ownedCondition struct {
	condType string
	negative bool
}

type summaryOptions struct {
	owned       []ownedCondition
	readyReason string
	readyMsg    string
}

// WithConditions makes SetSummary take the given positive-polarity condition
// types into account: True is good, False makes Ready False, Unknown or
// absent makes Ready Unknown. Types are evaluated in the order given, across
// all options.
func WithConditions(types ...string) SummaryOption {
	return func(o *summaryOptions) { o.add(false, types) }
}

// WithNegativePolarityConditions makes SetSummary take the given
// negative-polarity (abnormal-true) condition types into account, such as
// "Degraded": True makes Ready False, Unknown makes Ready Unknown, False or
// absent is good. Types are evaluated in the order given, across all options.
func WithNegativePolarityConditions(types ...string) SummaryOption {
	return func(o *summaryOptions) { o.add(true, types) }
}

// WithReadyReason sets the reason and message of Ready when it is True. The
// default is ReasonSucceeded and an empty message.
func WithReadyReason(reason, message string) SummaryOption {
	return func(o *summaryOptions) { o.readyReason, o.readyMsg = reason, message }
}

func (o *summaryOptions) add(negative bool, types []string) {
	for _, t := range types {
		switch t {
		case ConditionReady, ConditionReconciling, ConditionStalled:
			continue // Evaluated by SetSummary itself.
		}
		if !containsType(o.owned, t) {
			o.owned = append(o.owned, ownedCondition{condType: t, negative: negative})
		}
	}
}

func containsType(owned []ownedCondition, t string) bool {
	for _, oc := range owned {
		if oc.condType == t {
			return true
		}
	}
	return false
}

// SetSummary derives the Ready condition from Stalled, Reconciling and the
// owned conditions named in the options, sets it with Set, and reports
// whether obj's conditions changed. The first matching rule wins:
//
//  1. Stalled is True: Ready is False with Stalled's reason and message.
//  2. An owned condition is bad (a positive-polarity one is False, a
//     negative-polarity one is True): Ready is False with the reason of the
//     first such condition in option order, and a message naming it
//     ("Available is False: <its message>").
//  3. Reconciling is True: Ready is Unknown with Reconciling's reason and
//     message.
//  4. An owned condition is undecided (a positive-polarity one is Unknown or
//     absent, a negative-polarity one is Unknown): Ready is Unknown with the
//     reason and message of the first such condition in option order, or
//     ReasonConditionMissing when it is absent.
//  5. Otherwise Ready is True with ReasonSucceeded (or WithReadyReason).
//
// A definite failure (rules 1 and 2) beats "still working" (rule 3), because
// it tells the user what is wrong; an owned condition that is only
// undecided does not beat Reconciling, whose reason says what is being
// waited for.
//
// Listing Ready, Reconciling or Stalled in an option has no effect, and a
// type listed twice keeps the polarity of its first listing.
//
// Footgun: SetSummary looks only at Status, not at each owned condition's
// ObservedGeneration. Set every owned condition in the same pass before
// calling it, or a condition left over from an older generation still counts.
func SetSummary(obj Setter, opts ...SummaryOption) (changed bool) {
	o := summaryOptions{readyReason: ReasonSucceeded}
	for _, opt := range opts {
		opt(&o)
	}
	return Set(obj, summarize(obj, &o))
}

func summarize(obj Getter, o *summaryOptions) metav1.Condition {
	from := func(status metav1.ConditionStatus, c *metav1.Condition) metav1.Condition {
		return metav1.Condition{Type: ConditionReady, Status: status, Reason: c.Reason, Message: c.Message}
	}
	// fromOwned names the owned condition in the message, so that Ready
	// says where its reason comes from: a domain condition's reason (say
	// "Reconciling" on Available) must not read as the kstatus condition.
	fromOwned := func(status metav1.ConditionStatus, c *metav1.Condition) metav1.Condition {
		r := from(status, c)
		r.Message = c.Type + " is " + string(c.Status)
		if c.Message != "" {
			r.Message += ": " + c.Message
		}
		return r
	}
	if c := Get(obj, ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		return from(metav1.ConditionFalse, c)
	}
	for _, oc := range o.owned {
		c := Get(obj, oc.condType)
		if c == nil {
			continue
		}
		if (!oc.negative && c.Status == metav1.ConditionFalse) || (oc.negative && c.Status == metav1.ConditionTrue) {
			return fromOwned(metav1.ConditionFalse, c)
		}
	}
	if c := Get(obj, ConditionReconciling); c != nil && c.Status == metav1.ConditionTrue {
		return from(metav1.ConditionUnknown, c)
	}
	for _, oc := range o.owned {
		c := Get(obj, oc.condType)
		switch {
		case c == nil && !oc.negative:
			return metav1.Condition{
				Type: ConditionReady, Status: metav1.ConditionUnknown, Reason: ReasonConditionMissing,
				Message: fmt.Sprintf("condition %s has not been reported yet", oc.condType),
			}
		case c == nil:
			// An absent abnormal-true condition is good.
		case c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse:
			return fromOwned(metav1.ConditionUnknown, c)
		}
	}
	return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: o.readyReason, Message: o.readyMsg}
}
