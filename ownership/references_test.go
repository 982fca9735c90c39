package ownership_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/ownership"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatalf("building scheme: %v", err)
	}
	return s
}

func cmObj(ns, name, uid string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), OwnerReferences: refs}}
}

func clusterRole(name, uid string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
}

func nsObj(name, uid string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
}

func cmRef(name, uid string, controller bool) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: types.UID(uid)}
	if controller {
		r.Controller, r.BlockOwnerDeletion = new(true), new(true)
	}
	return r
}

func TestSetControllerReference(t *testing.T) {
	tests := []struct {
		name     string
		owner    client.Object
		obj      client.Object
		wantRefs []metav1.OwnerReference
		wantErr  error
		wantACE  *metav1.OwnerReference
	}{
		{
			name:     "namespaced owner, same namespace",
			owner:    cmObj("ns", "owner", "u1"),
			obj:      cmObj("ns", "dep", "d"),
			wantRefs: []metav1.OwnerReference{cmRef("owner", "u1", true)},
		},
		{
			name:     "idempotent when already the controller",
			owner:    cmObj("ns", "owner", "u1"),
			obj:      cmObj("ns", "dep", "d", cmRef("owner", "u1", true)),
			wantRefs: []metav1.OwnerReference{cmRef("owner", "u1", true)},
		},
		{
			name:     "promotes an existing plain reference and keeps others",
			owner:    cmObj("ns", "owner", "u1"),
			obj:      cmObj("ns", "dep", "d", cmRef("other", "u2", false), cmRef("owner", "u1", false)),
			wantRefs: []metav1.OwnerReference{cmRef("other", "u2", false), cmRef("owner", "u1", true)},
		},
		{
			name:  "cluster-scoped owner of a namespaced dependent",
			owner: clusterRole("role", "u3"),
			obj:   cmObj("ns", "dep", "d"),
			wantRefs: []metav1.OwnerReference{{
				APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "role", UID: "u3",
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		{
			name:     "cluster-scoped owner of a cluster-scoped dependent",
			owner:    nsObj("owner-ns", "u4"),
			obj:      clusterRole("role", "d"),
			wantRefs: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "owner-ns", UID: "u4", Controller: new(true), BlockOwnerDeletion: new(true)}},
		},
		{
			name:    "cross-namespace is refused",
			owner:   cmObj("ns", "owner", "u1"),
			obj:     cmObj("other", "dep", "d"),
			wantErr: ownership.ErrCrossNamespace,
		},
		{
			name:    "namespaced owner of a cluster-scoped dependent is refused",
			owner:   cmObj("ns", "owner", "u1"),
			obj:     clusterRole("role", "d"),
			wantErr: ownership.ErrClusterScopedDependent,
		},
		{
			name:    "owner without UID is refused",
			owner:   cmObj("ns", "owner", ""),
			obj:     cmObj("ns", "dep", "d"),
			wantErr: ownership.ErrOwnerNotPersisted,
		},
		{
			name:    "controlled by another owner",
			owner:   cmObj("ns", "owner", "u1"),
			obj:     cmObj("ns", "dep", "d", cmRef("other", "u2", true)),
			wantACE: new(cmRef("other", "u2", true)),
		},
		{
			name:    "controlled by an earlier incarnation of the owner",
			owner:   cmObj("ns", "owner", "u1"),
			obj:     cmObj("ns", "dep", "d", cmRef("owner", "old-uid", true)),
			wantACE: new(cmRef("owner", "old-uid", true)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.obj.DeepCopyObject()
			err := ownership.SetControllerReference(tc.owner, tc.obj, testScheme(t))
			switch {
			case tc.wantACE != nil:
				var ace *ownership.AlreadyControlledError
				if !errors.As(err, &ace) {
					t.Fatalf("SetControllerReference() error = %v, want *AlreadyControlledError", err)
				}
				if diff := cmp.Diff(*tc.wantACE, ace.Owner); diff != "" {
					t.Errorf("AlreadyControlledError.Owner (-want +got):\n%s", diff)
				}
				if ace.Object != tc.obj || ace.Error() == "" {
					t.Errorf("AlreadyControlledError.Object = %v, want the dependent; message %q", ace.Object, ace.Error())
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("SetControllerReference() error = %v, want %v", err, tc.wantErr)
				}
			default:
				if err != nil {
					t.Fatalf("SetControllerReference() error = %v", err)
				}
				if diff := cmp.Diff(tc.wantRefs, tc.obj.GetOwnerReferences()); diff != "" {
					t.Errorf("owner references (-want +got):\n%s", diff)
				}
				if !ownership.IsControlledBy(tc.obj, tc.owner) {
					t.Errorf("IsControlledBy() = false after SetControllerReference")
				}
				return
			}
			if diff := cmp.Diff(before, tc.obj); diff != "" {
				t.Errorf("obj changed on error (-before +after):\n%s", diff)
			}
		})
	}
}

func TestSetOwnerReference(t *testing.T) {
	tests := []struct {
		name     string
		owner    client.Object
		obj      client.Object
		wantRefs []metav1.OwnerReference
		wantErr  error
	}{
		{
			name:     "adds a plain reference",
			owner:    cmObj("ns", "owner", "u1"),
			obj:      cmObj("ns", "dep", "d"),
			wantRefs: []metav1.OwnerReference{cmRef("owner", "u1", false)},
		},
		{
			name:     "adds beside another controller",
			owner:    cmObj("ns", "owner", "u1"),
			obj:      cmObj("ns", "dep", "d", cmRef("ctrl", "u2", true)),
			wantRefs: []metav1.OwnerReference{cmRef("ctrl", "u2", true), cmRef("owner", "u1", false)},
		},
		{
			name:     "keeps the controller flag of an existing reference",
			owner:    cmObj("ns", "owner", "u1"),
			obj:      cmObj("ns", "dep", "d", cmRef("owner", "u1", true)),
			wantRefs: []metav1.OwnerReference{cmRef("owner", "u1", true)},
		},
		{
			name:    "cross-namespace is refused",
			owner:   cmObj("ns", "owner", "u1"),
			obj:     cmObj("other", "dep", "d"),
			wantErr: ownership.ErrCrossNamespace,
		},
		{
			name:    "cluster-scoped dependent is refused",
			owner:   cmObj("ns", "owner", "u1"),
			obj:     nsObj("dep", "d"),
			wantErr: ownership.ErrClusterScopedDependent,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ownership.SetOwnerReference(tc.owner, tc.obj, testScheme(t))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("SetOwnerReference() error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				if len(tc.obj.GetOwnerReferences()) != 0 {
					t.Errorf("obj changed on error: %v", tc.obj.GetOwnerReferences())
				}
				return
			}
			if diff := cmp.Diff(tc.wantRefs, tc.obj.GetOwnerReferences()); diff != "" {
				t.Errorf("owner references (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHasAndRemoveOwnerReference(t *testing.T) {
	owner := cmObj("ns", "owner", "u1")
	tests := []struct {
		name        string
		refs        []metav1.OwnerReference
		wantHas     bool
		wantRemoved bool
		wantRefs    []metav1.OwnerReference
	}{
		{name: "no references"},
		{
			name:        "plain reference",
			refs:        []metav1.OwnerReference{cmRef("owner", "u1", false), cmRef("other", "u2", true)},
			wantHas:     true,
			wantRemoved: true,
			wantRefs:    []metav1.OwnerReference{cmRef("other", "u2", true)},
		},
		{
			name:        "controller reference, last one",
			refs:        []metav1.OwnerReference{cmRef("owner", "u1", true)},
			wantHas:     true,
			wantRemoved: true,
		},
		{
			name:     "same name, different UID does not match",
			refs:     []metav1.OwnerReference{cmRef("owner", "u-old", false)},
			wantRefs: []metav1.OwnerReference{cmRef("owner", "u-old", false)},
		},
		{
			name:     "same name and UID, different group does not match",
			refs:     []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ConfigMap", Name: "owner", UID: "u1"}},
			wantRefs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ConfigMap", Name: "owner", UID: "u1"}},
		},
		{
			name:     "unparsable apiVersion does not match",
			refs:     []metav1.OwnerReference{{APIVersion: "a/b/c", Kind: "ConfigMap", Name: "owner", UID: "u1"}},
			wantRefs: []metav1.OwnerReference{{APIVersion: "a/b/c", Kind: "ConfigMap", Name: "owner", UID: "u1"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := cmObj("ns", "dep", "d", tc.refs...)
			has, err := ownership.HasOwnerReference(owner, obj, testScheme(t))
			if err != nil || has != tc.wantHas {
				t.Errorf("HasOwnerReference() = %v, %v; want %v, nil", has, err, tc.wantHas)
			}
			removed, err := ownership.RemoveOwnerReference(owner, obj, testScheme(t))
			if err != nil || removed != tc.wantRemoved {
				t.Errorf("RemoveOwnerReference() = %v, %v; want %v, nil", removed, err, tc.wantRemoved)
			}
			if diff := cmp.Diff(tc.wantRefs, obj.GetOwnerReferences()); diff != "" {
				t.Errorf("owner references after removal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReferenceLookupErrors(t *testing.T) {
	obj := cmObj("ns", "dep", "d")
	unknown := runtime.NewScheme() // knows no types
	if _, err := ownership.HasOwnerReference(cmObj("ns", "owner", ""), obj, testScheme(t)); !errors.Is(err, ownership.ErrOwnerNotPersisted) {
		t.Errorf("HasOwnerReference(owner without UID) error = %v, want ErrOwnerNotPersisted", err)
	}
	if _, err := ownership.HasOwnerReference(cmObj("ns", "owner", "u1"), obj, unknown); err == nil {
		t.Errorf("HasOwnerReference() with a scheme missing the owner's type: want error")
	}
	if _, err := ownership.RemoveOwnerReference(cmObj("ns", "owner", ""), obj, testScheme(t)); !errors.Is(err, ownership.ErrOwnerNotPersisted) {
		t.Errorf("RemoveOwnerReference(owner without UID) error = %v, want ErrOwnerNotPersisted", err)
	}
	if err := ownership.SetControllerReference(cmObj("ns", "owner", "u1"), obj, unknown); err == nil {
		t.Errorf("SetControllerReference() with a scheme missing the owner's type: want error")
	}
}

func TestIsControlledBy(t *testing.T) {
	tests := []struct {
		name  string
		obj   client.Object
		owner client.Object
		want  bool
	}{
		{name: "controller with the same UID", obj: cmObj("ns", "d", "d", cmRef("owner", "u1", true)), owner: cmObj("ns", "owner", "u1"), want: true},
		{name: "plain reference is not control", obj: cmObj("ns", "d", "d", cmRef("owner", "u1", false)), owner: cmObj("ns", "owner", "u1")},
		{name: "different UID", obj: cmObj("ns", "d", "d", cmRef("owner", "u1", true)), owner: cmObj("ns", "owner", "u2")},
		{name: "no references", obj: cmObj("ns", "d", "d"), owner: cmObj("ns", "owner", "u1")},
		{name: "owner without UID", obj: cmObj("ns", "d", "d", cmRef("owner", "", true)), owner: cmObj("ns", "owner", "")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ownership.IsControlledBy(tc.obj, tc.owner); got != tc.want {
				t.Errorf("IsControlledBy() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestControllerReferenceAcceptedByAPIServer persists references written by
// this package and reads them back.
func TestControllerReferenceAcceptedByAPIServer(t *testing.T) {
	ns := newNamespace(t)
	owner := newConfigMap(t, ns, "owner")
	role := &rbacv1.ClusterRole{}
	role.GenerateName = "ownership-owner-"
	if err := env.Client.Create(t.Context(), role); err != nil {
		t.Fatalf("creating ClusterRole: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), role) })

	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dependent"}}
	if err := ownership.SetControllerReference(owner, dep, env.Scheme); err != nil {
		t.Fatalf("SetControllerReference() error = %v", err)
	}
	if err := ownership.SetOwnerReference(role, dep, env.Scheme); err != nil {
		t.Fatalf("SetOwnerReference() error = %v", err)
	}
	if err := env.Client.Create(t.Context(), dep); err != nil {
		t.Fatalf("creating dependent: %v", err)
	}
	got, err := getConfigMap(t, client.ObjectKeyFromObject(dep))
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	want := []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: new(true), BlockOwnerDeletion: new(true)},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID},
	}
	if diff := cmp.Diff(want, got.OwnerReferences); diff != "" {
		t.Errorf("owner references on the server (-want +got):\n%s", diff)
	}
	if !ownership.IsControlledBy(got, owner) || ownership.IsControlledBy(got, role) {
		t.Errorf("IsControlledBy(owner, role) = %v, %v; want true, false", ownership.IsControlledBy(got, owner), ownership.IsControlledBy(got, role))
	}
}
