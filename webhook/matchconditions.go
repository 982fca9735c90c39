package webhook

import admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

// MatchConditions are the matchConditions for a kind's webhook
// configurations: the API server calls the webhooks only where they check
// something, not for an object being deleted nor for an update that
// leaves the spec as it was (labels, annotations, finalizers). Without
// them, with failurePolicy Fail and no replica serving, nobody can remove
// a finalizer.
func MatchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{Name: "not-being-deleted", Expression: "!has(object.metadata.deletionTimestamp)"},
		{Name: "spec-changed", Expression: "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec"},
	}
}
