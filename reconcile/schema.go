package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrStatusSchema is returned (wrapped) when the kind's schema on the API
// server lacks a status field the Reconciler writes: status.observedGeneration,
// or status.conditions as a list keyed by type. It usually means the Go type
// gained the fields but the CRD was not regenerated (controller-gen) and
// applied.
var ErrStatusSchema = errors.New("the kind's CRD does not declare the status fields the Reconciler writes")

// schemaNode is the part of an OpenAPI v3 schema the check reads.
type schemaNode struct {
	Properties        map[string]schemaNode `json:"properties"`
	PreserveUnknown   bool                  `json:"x-kubernetes-preserve-unknown-fields"`
	ListType          string                `json:"x-kubernetes-list-type"`
	ListMapKeys       []string              `json:"x-kubernetes-list-map-keys"`
	GroupVersionKinds []gvkExtension        `json:"x-kubernetes-group-version-kind"`
	AllOf             []schemaNode          `json:"allOf"`
	Ref               string                `json:"$ref"`
}

type gvkExtension struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// checkStatusSchema reads the OpenAPI v3 schema the API server publishes
// for gvk, the one server-side apply checks writes against, and returns an
// error wrapping ErrStatusSchema when it shows that a status write would be
// refused. Only positive evidence counts: a schema it cannot fetch or find
// (the API server has not published a new CRD yet, or does not serve
// OpenAPI v3) is not an error, and a status write's own error then names
// the fix (statusSchemaError).
func checkStatusSchema(cfg *rest.Config, gvk schema.GroupVersionKind, crdName string) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 10 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		return nil
	}
	path := "apis/" + gvk.Group + "/" + gvk.Version
	if gvk.Group == "" {
		path = "api/" + gvk.Version
	}
	gv, ok := paths[path]
	if !ok {
		return nil
	}
	b, err := gv.Schema("application/json")
	if err != nil {
		return nil
	}
	var doc struct {
		Components struct {
			Schemas map[string]schemaNode `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil
	}
	for _, s := range doc.Components.Schemas {
		if slices.Contains(s.GroupVersionKinds, gvkExtension{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}) {
			return statusSchemaProblem(s, gvk, crdName)
		}
	}
	return nil
}

// statusSchemaProblem returns the error of a kind's schema that lacks what
// the Reconciler writes, or nil.
func statusSchemaProblem(kind schemaNode, gvk schema.GroupVersionKind, crdName string) error {
	status, ok := kind.Properties["status"]
	if !ok || status.PreserveUnknown || status.Ref != "" || len(status.AllOf) > 0 {
		// No status (the status subresource's absence is reported by the
		// first write), fields left open, or a built-in type's reference:
		// nothing this check can prove.
		return nil
	}
	var missing, decls []string
	for _, f := range []struct{ name, decl string }{
		{"observedGeneration", "ObservedGeneration int64 `json:\"observedGeneration,omitempty\"`"},
		{"conditions", "Conditions []metav1.Condition `json:\"conditions,omitempty\"` (with +listType=map and +listMapKey=type)"},
	} {
		if _, ok := status.Properties[f.name]; !ok {
			missing = append(missing, "status."+f.name)
			decls = append(decls, f.decl)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s has no %s: add %s to the status type, regenerate the CRD with controller-gen (make manifests) and apply it",
			ErrStatusSchema, describeCRD(gvk, crdName), strings.Join(missing, " and no "), strings.Join(decls, " and "))
	}
	conds := status.Properties["conditions"]
	if conds.ListType != "map" || !slices.Equal(conds.ListMapKeys, []string{"type"}) {
		return fmt.Errorf("%w: %s declares status.conditions as a list that is not keyed by type, so applying the Reconciler's conditions would replace other controllers': mark the field // +listType=map and // +listMapKey=type, regenerate the CRD with controller-gen (make manifests) and apply it",
			ErrStatusSchema, describeCRD(gvk, crdName))
	}
	return nil
}

// describeCRD names the CRD of gvk for messages.
func describeCRD(gvk schema.GroupVersionKind, crdName string) string {
	if crdName == "" {
		return fmt.Sprintf("the CRD of %s", gvk)
	}
	return fmt.Sprintf("CRD %s (kind %s, version %s)", crdName, gvk.Kind, gvk.Version)
}

// statusSchemaError returns err, from a status apply, wrapped with
// ErrStatusSchema and the fix when the API server refused the write
// because the schema does not declare a field (an HTTP 500 "field not
// declared in schema" from building the typed patch); otherwise err.
func statusSchemaError(err error, gvk schema.GroupVersionKind, key client.ObjectKey) error {
	msg := err.Error()
	const marker = ": field not declared in schema"
	i := strings.Index(msg, marker)
	if i < 0 || !apierrors.IsInternalError(err) {
		return fmt.Errorf("applying status of %s %s: %w", gvk.Kind, key, err)
	}
	field := msg[strings.LastIndex(msg[:i], " ")+1 : i]
	field = strings.TrimPrefix(field, ".")
	return fmt.Errorf("%w: applying status of %s %s: the CRD of %s has no %s (%w): add it to the Go type, regenerate the CRD with controller-gen (make manifests) and apply it",
		ErrStatusSchema, gvk.Kind, key, gvk.GroupKind(), field, err)
}
