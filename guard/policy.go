package guard

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Policy returns a ValidatingAdmissionPolicy and its binding, both named
// name, that refuse to delete a held child while its namespace is being
// deleted and its guard exists. Without them, deleting the namespace
// deletes the children at once, before the owner's finalizer is done.
// Install them with the operator (they are cluster-scoped); one pair serves
// every guard in the cluster.
//
// The namespace stays Terminating until Release, which the namespace's
// conditions show with the policy's message; removing Finalizer from the
// guard, or deleting it, lets it go. The namespace controller retries with
// a growing delay, so a namespace held for a minute takes about another to
// go.
//
// Footgun: with ordered namespace deletion (Kubernetes 1.34+) the owner is
// deleted only after the namespace's pods it may delete are gone, so
// Finalize runs without them: give reconcile.WithNamespaceDeletion to
// SetupWithManager, or do Finalize's work in Reconcile when
// NamespaceDeleting reports true.
func Policy(name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: LabelHeldBy, Operator: metav1.LabelSelectorOpExists}}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"},
							Resources: []string{"*"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
					}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(namespaceObject.metadata.deletionTimestamp) || " +
					"oldObject.metadata.labels['" + LabelHeldBy + "'] != params.metadata.uid",
				MessageExpression: "'held by guard ' + params.metadata.name + ' until its owner\\'s finalizer is done; " +
					"delete ConfigMap ' + params.metadata.name + ' and remove its finalizer " + Finalizer + " to delete it now'",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			ParamRef: &admissionregistrationv1.ParamRef{
				Selector:                &metav1.LabelSelector{MatchLabels: map[string]string{LabelGuard: "true"}},
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return p, b
}
