package controller

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// OwnedFlags are the etcd flags spec.extraArgs may not set: the operator
// sets them (names, URLs, data, bootstrap, TLS, quota, compaction), or
// they would lose acknowledged writes (unsafe-no-fsync) or replace every
// flag (config-file). The CRD's rule on spec.extraArgs lists the same.
var OwnedFlags = []string{
	"advertise-client-urls", "auto-compaction-mode", "auto-compaction-retention", "auto-tls",
	"cert-file", "client-cert-auth", "config-file", "data-dir", "discovery", "discovery-srv",
	"force-new-cluster", "initial-advertise-peer-urls", "initial-cluster", "initial-cluster-state",
	"initial-cluster-token", "key-file", "listen-client-urls", "listen-metrics-urls", "listen-peer-urls",
	"name", "peer-auto-tls", "peer-cert-file", "peer-client-cert-auth", "peer-key-file",
	"peer-trusted-ca-file", "quota-backend-bytes", "trusted-ca-file", "unsafe-no-fsync", "wal-dir",
}

// quotaFlag starts the flag of spec.quotaBackendBytes; podQuota reads it back.
const quotaFlag = "--quota-backend-bytes="

// specFlags are the etcd flags of spec.quotaBackendBytes,
// spec.autoCompaction and spec.extraArgs, in a stable order.
func specFlags(c *v1alpha1.EtcdCluster) []string {
	var out []string
	if q := c.Spec.QuotaBackendBytes; q != nil {
		out = append(out, quotaFlag+strconv.FormatInt(q.Value(), 10))
	}
	if a := c.Spec.AutoCompaction; a != nil {
		mode := a.Mode
		if mode == "" {
			mode = "periodic"
		}
		out = append(out, "--auto-compaction-mode="+mode, "--auto-compaction-retention="+a.Retention)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Spec.ExtraArgs)) {
		out = append(out, "--"+k+"="+c.Spec.ExtraArgs[k])
	}
	return out
}

// validateFlags refuses extra arguments that name a flag the operator owns
// or that are no flag name; the schema refuses them too, but not in
// objects stored before it did.
func validateFlags(c *v1alpha1.EtcdCluster) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "extraArgs")
	for _, k := range slices.Sorted(maps.Keys(c.Spec.ExtraArgs)) {
		switch name := strings.TrimPrefix(k, "--"); {
		case slices.Contains(OwnedFlags, name):
			errs = append(errs, field.Forbidden(path.Key(k),
				fmt.Sprintf("the operator sets --%s itself; remove it (quota and compaction have fields of their own: spec.quotaBackendBytes, spec.autoCompaction)", name)))
		case !validFlagName(k):
			errs = append(errs, field.Invalid(path.Key(k), k, `a flag name without "--": lower-case letters, digits and "-"`))
		}
	}
	return errs
}

func validFlagName(k string) bool {
	if k == "" || k[0] == '-' {
		return false
	}
	return strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}
