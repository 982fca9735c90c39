package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
)

// statusSchemas are the status schemas of CRDs made the way a port goes
// wrong: the Go type has the fields, the CRD was not regenerated.
var (
	conditionsSchema = apiextensionsv1.JSONSchemaProps{
		Type: "array",
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type:     "object",
			Required: []string{"type", "status"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"type": {Type: "string"}, "status": {Type: "string"}, "reason": {Type: "string"},
				"message": {Type: "string"}, "observedGeneration": {Type: "integer", Format: "int64"},
				"lastTransitionTime": {Type: "string", Format: "date-time"},
			},
		}},
		XListType:    ptrTo("map"),
		XListMapKeys: []string{"type"},
	}
	generationSchema = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
)

func ptrTo[V any](v V) *V { return &v }

// installWidgetCRD installs a CRD for testv1.Widget's Go type under group
// with the given status properties, and returns a scheme that maps the Go
// type to it. It waits until the API server publishes the kind's OpenAPI
// schema, which is what a server-side apply is checked against.
func installWidgetCRD(t *testing.T, group string, status map[string]apiextensionsv1.JSONSchemaProps) *runtime.Scheme {
	t.Helper()
	ctx := t.Context()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   {Type: "object", XPreserveUnknownFields: ptrTo(true)},
						"status": {Type: "object", Properties: status},
					},
				}},
			}},
		},
	}
	testkit.Must(t, env.Client.Create(ctx, crd))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crd) })

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	testkit.Must(t, err)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		paths, err := dc.OpenAPIV3().Paths()
		if err != nil {
			return false, nil
		}
		gv, ok := paths["apis/"+group+"/v1"]
		if !ok {
			return false, nil
		}
		b, err := gv.Schema("application/json")
		return err == nil && strings.Contains(string(b), `"kind":"Widget"`), nil
	})
	testkit.Must(t, err)

	s := runtime.NewScheme()
	testkit.Must(t, clientgoscheme.AddToScheme(s))
	gv := schema.GroupVersion{Group: group, Version: "v1"}
	s.AddKnownTypeWithName(gv.WithKind("Widget"), &testv1.Widget{})
	s.AddKnownTypeWithName(gv.WithKind("WidgetList"), &testv1.WidgetList{})
	metav1.AddToGroupVersion(s, gv)
	return s
}

// TestSetupRefusesAStatusSchemaWithoutItsFields: a CRD whose status lacks
// observedGeneration or conditions (the Go type has them, the CRD was not
// regenerated) makes every status write fail with an HTTP 500 "field not
// declared in schema". SetupWithManager says so at once, naming the CRD,
// the field and the fix.
func TestSetupRefusesAStatusSchemaWithoutItsFields(t *testing.T) {
	tests := []struct {
		name   string
		group  string
		status map[string]apiextensionsv1.JSONSchemaProps
		want   []string // in the error; none means no error
	}{
		{"complete", "complete.schema.opkit.dev", map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": generationSchema, "conditions": conditionsSchema,
		}, nil},
		{"no observedGeneration", "nogen.schema.opkit.dev", map[string]apiextensionsv1.JSONSchemaProps{
			"conditions": conditionsSchema,
		}, []string{"widgets.nogen.schema.opkit.dev", "status.observedGeneration", "controller-gen"}},
		{"no conditions", "noconds.schema.opkit.dev", map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": generationSchema,
		}, []string{"widgets.noconds.schema.opkit.dev", "status.conditions", "controller-gen"}},
		{"conditions not a map list", "atomic.schema.opkit.dev", map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": generationSchema,
			"conditions":         {Type: "array", Items: conditionsSchema.Items},
		}, []string{"widgets.atomic.schema.opkit.dev", "+listType=map", "+listMapKey=type"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := installWidgetCRD(t, tt.group, tt.status)
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
				Scheme:                 s,
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
			})
			testkit.Must(t, err)
			_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, publishHooks{},
				reconcile.WithName("schema-"+tt.name), reconcile.WithSkipNameValidation())
			if len(tt.want) == 0 {
				testkit.Must(t, err)
				return
			}
			if !errors.Is(err, reconcile.ErrStatusSchema) {
				t.Fatalf("SetupWithManager = %v, want ErrStatusSchema", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestStatusWriteAgainstAnOldSchemaSaysWhy: New cannot look at the CRD
// (it has no manager), so the status write's own failure must carry the
// fix rather than only the API server's 500.
func TestStatusWriteAgainstAnOldSchemaSaysWhy(t *testing.T) {
	s := installWidgetCRD(t, "oldschema.schema.opkit.dev", map[string]apiextensionsv1.JSONSchemaProps{
		"conditions": conditionsSchema,
	})
	c, err := client.New(env.Config, client.Options{Scheme: s})
	testkit.Must(t, err)
	f := newFixture(t)
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: f.ns}}
	testkit.Must(t, c.Create(t.Context(), w))
	r, err := reconcile.New[*testv1.Widget](c, s, publishHooks{})
	testkit.Must(t, err)
	_, err = r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w)})
	if !errors.Is(err, reconcile.ErrStatusSchema) || !strings.Contains(err.Error(), "status.observedGeneration") {
		t.Errorf("pass = %v, want ErrStatusSchema naming status.observedGeneration", err)
	}
}
