package ownership_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/ownership"
)

var appLabels = map[string]string{"app": "web"}

func TestAdopt(t *testing.T) {
	ns := newNamespace(t)
	owner := newConfigMap(t, ns, "owner")
	other := newConfigMap(t, ns, "other-owner")
	selector := labels.SelectorFromSet(appLabels)

	tests := []struct {
		name        string
		setup       func(*corev1.ConfigMap)
		selector    labels.Selector
		wantAdopted bool
		wantACE     bool
		wantCalls   []string
		wantCtrl    string // name of the controller on the server afterwards
	}{
		{name: "matching orphan is adopted", setup: withLabels(appLabels), selector: selector, wantAdopted: true, wantCalls: []string{"patch"}, wantCtrl: "owner"},
		{
			name: "matching orphan with a plain reference to someone else is adopted",
			setup: func(cm *corev1.ConfigMap) {
				cm.Labels = appLabels
				cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: other.Name, UID: other.UID}}
			},
			selector: selector, wantAdopted: true, wantCalls: []string{"patch"}, wantCtrl: "owner",
		},
		{name: "non-matching orphan is left alone", setup: withLabels(map[string]string{"app": "db"}), selector: selector},
		{name: "Nothing() adopts nothing", setup: withLabels(appLabels), selector: labels.Nothing()},
		{
			name: "object controlled by another is refused",
			setup: func(cm *corev1.ConfigMap) {
				cm.Labels = appLabels
				cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: other.Name, UID: other.UID, Controller: new(true)}}
			},
			selector: selector, wantACE: true, wantCtrl: "other-owner",
		},
		{
			name: "object already ours is a no-op",
			setup: func(cm *corev1.ConfigMap) {
				cm.Labels = appLabels
				cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: new(true)}}
			},
			selector: selector, wantCtrl: "owner",
		},
		{
			name: "object already ours whose labels stopped matching is kept",
			setup: func(cm *corev1.ConfigMap) {
				cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: new(true)}}
			},
			selector: selector, wantCtrl: "owner",
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cm := newConfigMap(t, ns, fmt.Sprintf("dep-%d", i), tc.setup)
			c, rec := newClient(t, hooks{})
			adopted, err := ownership.Adopt(t.Context(), c, owner, cm, tc.selector, env.Scheme)
			var ace *ownership.AlreadyControlledError
			if tc.wantACE != errors.As(err, &ace) || (!tc.wantACE && err != nil) {
				t.Fatalf("Adopt() error = %v, want AlreadyControlledError: %v", err, tc.wantACE)
			}
			if tc.wantACE && ace.Owner.UID != other.UID {
				t.Errorf("AlreadyControlledError.Owner.UID = %s, want %s", ace.Owner.UID, other.UID)
			}
			if adopted != tc.wantAdopted {
				t.Errorf("Adopt() adopted = %v, want %v", adopted, tc.wantAdopted)
			}
			assertCalls(t, rec, tc.wantCalls...)

			server, err := getConfigMap(t, client.ObjectKeyFromObject(cm))
			if err != nil {
				t.Fatalf("reading back: %v", err)
			}
			gotCtrl := ""
			if ref := metav1.GetControllerOf(server); ref != nil {
				gotCtrl = ref.Name
			}
			if gotCtrl != tc.wantCtrl {
				t.Errorf("controller on the server = %q, want %q", gotCtrl, tc.wantCtrl)
			}
			if diff := cmp.Diff(server.OwnerReferences, cm.OwnerReferences); diff != "" {
				t.Errorf("obj differs from the server's copy (-server +obj):\n%s", diff)
			}
			if tc.wantAdopted && !ownership.IsControlledBy(cm, owner) {
				t.Errorf("IsControlledBy(obj, owner) = false after adoption")
			}
		})
	}
}

// TestAdoptRefusals covers the cases decided before any request.
func TestAdoptRefusals(t *testing.T) {
	ns := newNamespace(t)
	otherNS := newNamespace(t)
	owner := newConfigMap(t, ns, "owner")
	dependent := newConfigMap(t, ns, "dependent", withLabels(appLabels))
	elsewhere := newConfigMap(t, otherNS, "elsewhere", withLabels(appLabels))
	clusterScoped := &corev1.Namespace{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: otherNS}, clusterScoped); err != nil {
		t.Fatalf("reading namespace: %v", err)
	}
	deletingOwner := owner.DeepCopy()
	deletingOwner.DeletionTimestamp = new(metav1.Now())

	tests := []struct {
		name     string
		owner    client.Object
		obj      client.Object
		selector labels.Selector
		wantErr  error // nil: any error
	}{
		{name: "nil selector", owner: owner, obj: dependent},
		{name: "cross-namespace", owner: owner, obj: elsewhere, selector: labels.Everything(), wantErr: ownership.ErrCrossNamespace},
		{name: "cluster-scoped dependent", owner: owner, obj: clusterScoped, selector: labels.Everything(), wantErr: ownership.ErrClusterScopedDependent},
		{name: "owner being deleted", owner: deletingOwner, obj: dependent, selector: labels.Everything(), wantErr: ownership.ErrBeingDeleted},
		{name: "owner not persisted", owner: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}, obj: dependent, selector: labels.Everything(), wantErr: ownership.ErrOwnerNotPersisted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, rec := newClient(t, hooks{})
			before := tc.obj.DeepCopyObject()
			adopted, err := ownership.Adopt(t.Context(), c, tc.owner, tc.obj, tc.selector, env.Scheme)
			if err == nil || adopted {
				t.Fatalf("Adopt() = %v, %v; want false and an error", adopted, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Adopt() error = %v, want %v", err, tc.wantErr)
			}
			assertCalls(t, rec)
			if diff := cmp.Diff(before, tc.obj); diff != "" {
				t.Errorf("obj changed on error (-before +after):\n%s", diff)
			}
		})
	}
}

// TestAdoptRace has two owners adopt the same orphan from the same stale
// copy: the first wins, the second conflicts, re-reads and is refused.
func TestAdoptRace(t *testing.T) {
	ns := newNamespace(t)
	first := newConfigMap(t, ns, "first")
	second := newConfigMap(t, ns, "second")
	orphan := newConfigMap(t, ns, "orphan", withLabels(appLabels))
	copy1, copy2 := orphan.DeepCopy(), orphan.DeepCopy()
	c1, rec1 := newClient(t, hooks{})
	c2, rec2 := newClient(t, hooks{})

	if adopted, err := ownership.Adopt(t.Context(), c1, first, copy1, labels.Everything(), env.Scheme); err != nil || !adopted {
		t.Fatalf("first Adopt() = %v, %v; want true, nil", adopted, err)
	}
	adopted, err := ownership.Adopt(t.Context(), c2, second, copy2, labels.Everything(), env.Scheme)
	var ace *ownership.AlreadyControlledError
	if !errors.As(err, &ace) || adopted {
		t.Fatalf("second Adopt() = %v, %v; want false, *AlreadyControlledError", adopted, err)
	}
	if ace.Owner.UID != first.UID {
		t.Errorf("AlreadyControlledError.Owner.UID = %s, want the first owner's %s", ace.Owner.UID, first.UID)
	}
	assertCalls(t, rec1, "patch")
	assertCalls(t, rec2, "patch", "get")
	server, err := getConfigMap(t, client.ObjectKeyFromObject(orphan))
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if !ownership.IsControlledBy(server, first) || len(server.OwnerReferences) != 1 {
		t.Errorf("owner references on the server = %+v, want only the first owner as controller", server.OwnerReferences)
	}
}

func TestAdoptObjectBeingDeletedOrGone(t *testing.T) {
	ns := newNamespace(t)
	owner := newConfigMap(t, ns, "owner")

	t.Run("being deleted", func(t *testing.T) {
		cm := newConfigMap(t, ns, "deleting", withLabels(appLabels), withFinalizers(finA))
		key := client.ObjectKeyFromObject(cm)
		t.Cleanup(func() { forceRemoveFinalizers(t, key) })
		if err := env.Client.Delete(t.Context(), cm); err != nil {
			t.Fatalf("deleting: %v", err)
		}
		deleting, err := getConfigMap(t, key)
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		c, rec := newClient(t, hooks{})
		adopted, err := ownership.Adopt(t.Context(), c, owner, deleting, labels.Everything(), env.Scheme)
		if err != nil || adopted {
			t.Errorf("Adopt() = %v, %v; want false, nil", adopted, err)
		}
		assertCalls(t, rec)
	})
	t.Run("gone before the patch", func(t *testing.T) {
		cm := newConfigMap(t, ns, "gone", withLabels(appLabels))
		c, rec := newClient(t, hooks{beforePatch: func(int) error { return env.Client.Delete(t.Context(), cm.DeepCopy()) }})
		adopted, err := ownership.Adopt(t.Context(), c, owner, cm, labels.Everything(), env.Scheme)
		if err != nil || adopted {
			t.Errorf("Adopt() = %v, %v; want false, nil", adopted, err)
		}
		assertCalls(t, rec, "patch")
	})
}
