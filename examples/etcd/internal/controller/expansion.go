package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/statusutil"
)

// Reasons of the StorageResized condition, and the events of an expansion.
const (
	// EventExpandingVolume (Normal): a member's claim is asked for the
	// larger spec.storage.size.
	EventExpandingVolume = "ExpandingVolume"
	// ReasonExpanding: claims were asked for spec.storage.size and do not
	// have it yet (the volume's driver, and for some the kubelet, resize).
	ReasonExpanding = "Expanding"
	// ReasonExpansionNotAllowed (also a Warning event): the API server
	// refused a claim the larger size, most often because its
	// StorageClass does not set allowVolumeExpansion.
	ReasonExpansionNotAllowed = "ExpansionNotAllowed"
)

// expandClaims asks every bound member claim smaller than
// spec.storage.size for that size and reports the outcome in the
// StorageResized condition, which appears only once the spec outgrows a
// claim. A refusal stops nothing else.
func (h *ClusterHooks) expandClaims(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) error {
	if !persistent(c) || c.Spec.Storage.Size == nil {
		return nil
	}
	want := *c.Spec.Storage.Size
	old := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionStorageResized)
	resizing := old != nil
	var refused, expanding []string
	var refusal string
	for _, name := range slices.Sorted(maps.Keys(obs.claimObjects)) {
		claim := obs.claimObjects[name]
		if claim.DeletionTimestamp != nil {
			continue
		}
		requested := claim.Spec.Resources.Requests[corev1.ResourceStorage]
		if requested.Cmp(want) >= 0 {
			// A claim still pending has no capacity yet, and is made at the size.
			capacity := claim.Status.Capacity[corev1.ResourceStorage]
			if resizing && claim.Status.Phase == corev1.ClaimBound && capacity.Cmp(want) < 0 {
				expanding = append(expanding, fmt.Sprintf("%s has %s%s", claim.Name, capacity.String(), resizeConditions(claim)))
			}
			continue
		}
		if claim.Status.Phase != corev1.ClaimBound {
			// Only a bound claim may grow; this one is asked once bound.
			continue
		}
		err := h.growClaim(ctx, claim, want)
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or changed since observed: the next pass sees which.
			continue
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			refused = append(refused, fmt.Sprintf("%s (%s)", claim.Name, requested.String()))
			if refusal == "" {
				refusal = apiMessage(err)
			}
		case err != nil:
			return fmt.Errorf("expanding claim %s to %s: %w", claim.Name, want.String(), err)
		default:
			emit(h.Recorder, c, normal, EventExpandingVolume, "ExpandClaim",
				fmt.Sprintf("claim %s asked for %s (had %s)", claim.Name, want.String(), requested.String()))
			expanding = append(expanding, fmt.Sprintf("%s asked for %s", claim.Name, want.String()))
		}
	}
	switch {
	case len(refused) > 0:
		msg := fmt.Sprintf("spec.storage.size %s is refused for claims %s: %s. Set allowVolumeExpansion on their StorageClass if its driver can "+
			"expand volumes (the claims are retried on the next pass), or restore a backup into a new cluster with larger volumes", want.String(), strings.Join(refused, ", "), refusal)
		if old == nil || old.Reason != ReasonExpansionNotAllowed {
			emit(h.Recorder, c, warning, ReasonExpansionNotAllowed, "ExpandClaim", msg)
		}
		statusutil.MarkFalse(c, v1alpha1.ConditionStorageResized, ReasonExpansionNotAllowed, msg)
	case len(expanding) > 0:
		statusutil.MarkFalse(c, v1alpha1.ConditionStorageResized, ReasonExpanding,
			fmt.Sprintf("expanding the members' claims to %s: %s", want.String(), strings.Join(expanding, "; ")))
	case resizing:
		statusutil.MarkTrue(c, v1alpha1.ConditionStorageResized, "ClaimsAtSize",
			fmt.Sprintf("every member's claim has %s", want.String()))
	}
	return nil
}

// growClaim asks claim for size with a patch on the version observed. An
// apply would create a claim deleted since, empty, under a member that
// is then recreated on it with its old ID.
func (h *ClusterHooks) growClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim, size resource.Quantity) error {
	grown := claim.DeepCopy()
	if grown.Spec.Resources.Requests == nil {
		grown.Spec.Resources.Requests = corev1.ResourceList{}
	}
	grown.Spec.Resources.Requests[corev1.ResourceStorage] = size
	return h.Client.Patch(ctx, grown, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
}

// apiMessage is the API server's own message of err, without the
// wrapping that names the request.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// resizeConditions names the claim's resize conditions, such as
// FileSystemResizePending (the volume grew; the kubelet grows the file
// system, for some drivers only when the pod restarts).
func resizeConditions(claim *corev1.PersistentVolumeClaim) string {
	var out []string
	for _, cond := range claim.Status.Conditions {
		if cond.Status == corev1.ConditionTrue {
			out = append(out, string(cond.Type))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, ", ") + ")"
}
