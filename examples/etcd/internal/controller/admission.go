package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/reconcile"
)

var (
	_ reconcile.AdmissionValidator[*v1alpha1.EtcdCluster] = (*ClusterHooks)(nil)
	_ reconcile.Warner[*v1alpha1.EtcdCluster]             = (*ClusterHooks)(nil)
)

// +kubebuilder:webhook:path=/validate-etcd-opkit-dev-v1alpha1-etcdcluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=etcd.opkit.dev,resources=etcdclusters,verbs=create;update,versions=v1alpha1,name=vetcdcluster.etcd.opkit.dev,admissionReviewVersions=v1,timeoutSeconds=5

// ValidateAdmission refuses at admission what a pass sets aside
// (invalidFields): a version etcd cannot move to from the one its members
// run or older than MinVersion, a schedule that does not parse, and the
// operator's labels in spec.podTemplate.labels (reservedLabel). It checks only what the
// request sets or changes, so that an object stored while invalid can
// still be edited. It also refuses TLS Secrets that exist but would not
// serve the cluster.
func (h *ClusterHooks) ValidateAdmission(ctx context.Context, old, c *v1alpha1.EtcdCluster) field.ErrorList {
	was := &v1alpha1.EtcdCluster{}
	if old != nil {
		was = old
	}
	var errs field.ErrorList
	if c.Spec.Version != was.Spec.Version {
		// The status subresource keeps the stored status: this is the
		// version the members run.
		if err := membership.CheckUpgrade(was.Status.Version, c.Spec.Version); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "version"), c.Spec.Version, err.Error()))
		} else if lessVersion(c.Spec.Version, MinVersion) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "version"), c.Spec.Version,
				"members are probed for readiness on /readyz, which etcd serves from "+MinVersion+": use "+MinVersion+" or later"))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Spec.PodTemplate.Labels)) {
		if reservedLabel(k) && c.Spec.PodTemplate.Labels[k] != was.Spec.PodTemplate.Labels[k] {
			errs = append(errs, field.Invalid(field.NewPath("spec", "podTemplate", "labels").Key(k), c.Spec.PodTemplate.Labels[k],
				"the operator's label (it says which members serve clients, vote or are held for the final backup): remove it"))
		}
	}
	for _, s := range []struct {
		path     *field.Path
		now, was string
	}{
		{field.NewPath("spec", "backup", "schedule"), backupSchedule(c), backupSchedule(was)},
		{field.NewPath("spec", "defragmentation", "schedule"), defragSchedule(c), defragSchedule(was)},
	} {
		if s.now == "" || s.now == s.was {
			continue
		}
		if _, err := backup.ParseSchedule(s.now); err != nil {
			errs = append(errs, field.Invalid(s.path, s.now, err.Error()))
		}
	}
	if old == nil {
		errs = append(errs, h.checkTLSSecrets(ctx, c)...)
	}
	return errs
}

// Warnings warns, on create, of TLS Secrets not there yet: the cluster
// waits for them (TLSSecretMissing). Not refused, as a Secret and its
// cluster are often applied together, in any order.
func (h *ClusterHooks) Warnings(ctx context.Context, old, c *v1alpha1.EtcdCluster) []string {
	if old != nil || c.Spec.TLS == nil || c.Spec.TLS.Auto != nil {
		return nil
	}
	var warnings []string
	for _, role := range tlsRoles {
		if sec, err := getSecret(ctx, h.Secrets, c.Namespace, role.secret(c)); err == nil && sec == nil {
			warnings = append(warnings, fmt.Sprintf("spec.tls.%s: Secret %q is not in namespace %s yet: the cluster starts once it is",
				role.field, role.secret(c), c.Namespace))
		}
	}
	return warnings
}

// checkTLSSecrets refuses spec.tls Secrets that exist but do not hold the
// certificate their role needs (readCertificates' checks): the cluster
// would wait for a fix with no member started.
func (h *ClusterHooks) checkTLSSecrets(ctx context.Context, c *v1alpha1.EtcdCluster) field.ErrorList {
	if c.Spec.TLS == nil || c.Spec.TLS.Auto != nil {
		return nil
	}
	var errs field.ErrorList
	for _, role := range tlsRoles {
		path := field.NewPath("spec", "tls", role.field)
		sec, err := getSecret(ctx, h.Secrets, c.Namespace, role.secret(c))
		switch {
		case err != nil:
			errs = append(errs, field.InternalError(path, err))
		case sec == nil:
		default:
			if _, err := verifySecret(sec, role, c, h.now()); err != nil {
				errs = append(errs, field.Invalid(path, sec.Name, fmt.Sprintf("the %s certificate: %v; fix the Secret or name another", role.name, err)))
			}
		}
	}
	return errs
}

func backupSchedule(c *v1alpha1.EtcdCluster) string {
	if c.Spec.Backup == nil {
		return ""
	}
	return c.Spec.Backup.Schedule
}

func defragSchedule(c *v1alpha1.EtcdCluster) string {
	if c.Spec.Defragmentation == nil {
		return ""
	}
	return c.Spec.Defragmentation.Schedule
}
