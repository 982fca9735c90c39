package localpv_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/opkit-dev/opkit/internal/localcluster/localpv"
)

const node = "node-a"

func newProvisioner(t *testing.T) *localpv.Provisioner {
	t.Helper()
	p, err := localpv.New(t.TempDir(), node)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func claim(ns, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi"),
			}},
		},
	}
}

func options(c *corev1.PersistentVolumeClaim, pvName, selected string) controller.ProvisionOptions {
	return controller.ProvisionOptions{
		StorageClass:     localpv.StorageClass(localpv.DefaultProvisionerName),
		PVName:           pvName,
		PVC:              c,
		SelectedNodeName: selected,
	}
}

func TestProvisionCreatesDirectoryAndVolume(t *testing.T) {
	p := newProvisioner(t)
	pv, state, err := p.Provision(t.Context(), options(claim("shop", "data-etcd-0"), "pvc-123", node))
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision: %v, %v; want nil, %s", state, err, controller.ProvisioningFinished)
	}
	dir := filepath.Join(p.Root(), "shop-data-etcd-0-pvc-123")
	want := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-123"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              localpv.StorageClassName,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: dir, Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}}}},
			}},
		},
	}
	if diff := cmp.Diff(want, pv); diff != "" {
		t.Errorf("PersistentVolume mismatch (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("volume directory: %v", err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != localpv.DirMode {
		t.Errorf("volume directory mode %v, want a directory with %v", fi.Mode(), localpv.DirMode)
	}

	// A retried provision reuses the directory.
	if _, _, err := p.Provision(t.Context(), options(claim("shop", "data-etcd-0"), "pvc-123", node)); err != nil {
		t.Errorf("Provision again: %v", err)
	}
}

func TestProvisionUsesClassReclaimPolicy(t *testing.T) {
	p := newProvisioner(t)
	opts := options(claim("shop", "data"), "pvc-1", node)
	opts.StorageClass.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimRetain)
	pv, _, err := p.Provision(t.Context(), opts)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if got := pv.Spec.PersistentVolumeReclaimPolicy; got != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("reclaim policy %s, want Retain", got)
	}
}

func TestProvisionRefuses(t *testing.T) {
	tests := []struct {
		name    string
		opts    func() controller.ProvisionOptions
		wantErr error  // matched with errors.Is, if set
		ignored bool   // want a *controller.IgnoredError
		substr  string // the error names the problem
	}{
		{name: "other node", opts: func() controller.ProvisionOptions { return options(claim("shop", "data"), "pvc-1", "node-b") }, ignored: true, substr: `"node-b"`},
		{name: "no selected node", opts: func() controller.ProvisionOptions { return options(claim("shop", "data"), "pvc-1", "") }, substr: "WaitForFirstConsumer"},
		{name: "namespace ..", opts: func() controller.ProvisionOptions { return options(claim("..", "data"), "pvc-1", node) }, wantErr: localpv.ErrInvalidName, substr: "namespace"},
		{name: "claim name with slash", opts: func() controller.ProvisionOptions { return options(claim("shop", "a/b"), "pvc-1", node) }, wantErr: localpv.ErrInvalidName, substr: "claim name"},
		{name: "volume name escaping root", opts: func() controller.ProvisionOptions {
			return options(claim("shop", "data"), "../../etc", node)
		}, wantErr: localpv.ErrInvalidName, substr: "volume name"},
		{name: "empty volume name", opts: func() controller.ProvisionOptions { return options(claim("shop", "data"), "", node) }, wantErr: localpv.ErrInvalidName},
		{name: "block mode", opts: func() controller.ProvisionOptions {
			o := options(claim("shop", "data"), "pvc-1", node)
			o.PVC.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
			return o
		}, substr: "Block"},
		{name: "selector", opts: func() controller.ProvisionOptions {
			o := options(claim("shop", "data"), "pvc-1", node)
			o.PVC.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
			return o
		}, substr: "selector"},
		{name: "mount options", opts: func() controller.ProvisionOptions {
			o := options(claim("shop", "data"), "pvc-1", node)
			o.StorageClass.MountOptions = []string{"noatime"}
			return o
		}, substr: "mountOptions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProvisioner(t)
			pv, state, err := p.Provision(t.Context(), tt.opts())
			if err == nil {
				t.Fatalf("Provision = %v, nil error; want an error", pv)
			}
			if state != controller.ProvisioningFinished {
				t.Errorf("state %s, want %s (a final error)", state, controller.ProvisioningFinished)
			}
			var ignored *controller.IgnoredError
			if got := errors.As(err, &ignored); got != tt.ignored {
				t.Errorf("error %q is IgnoredError: %v, want %v", err, got, tt.ignored)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q does not wrap %q", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.substr) {
				t.Errorf("error %q does not mention %q", err, tt.substr)
			}
			entries, _ := os.ReadDir(p.Root())
			if len(entries) != 0 {
				t.Errorf("root holds %d entries after a refused provision, want none", len(entries))
			}
			if parent, _ := os.ReadDir(filepath.Dir(p.Root())); len(parent) != 1 {
				t.Errorf("root's parent holds %d entries, want only the root", len(parent))
			}
		})
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name    string
		path    func(root string) string // hostPath of the volume; nil: no hostPath
		node    string
		wantErr error
		ignored bool
		removed bool // the directory the volume names is gone afterwards
	}{
		{name: "own volume", path: func(r string) string { return filepath.Join(r, "shop-data-pvc-1") }, node: node, removed: true},
		{name: "already gone", path: func(r string) string { return filepath.Join(r, "shop-gone-pvc-2") }, node: node, removed: true},
		{name: "the root itself", path: func(r string) string { return r }, node: node, wantErr: localpv.ErrOutsideRoot},
		{name: "outside the root", path: func(r string) string { return filepath.Join(filepath.Dir(r), "outside") }, node: node, wantErr: localpv.ErrOutsideRoot},
		{name: "escape with ..", path: func(r string) string { return r + "/../outside" }, node: node, wantErr: localpv.ErrOutsideRoot},
		{name: "nested below the root", path: func(r string) string { return filepath.Join(r, "shop-data-pvc-1", "sub") }, node: node, wantErr: localpv.ErrOutsideRoot},
		{name: "relative", path: func(string) string { return "shop-data-pvc-1" }, node: node, wantErr: localpv.ErrOutsideRoot},
		{name: "other node", path: func(r string) string { return filepath.Join(r, "shop-data-pvc-1") }, node: "node-b", ignored: true},
		{name: "not hostPath", node: node},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProvisioner(t)
			// Directories a wrong Delete could remove: a volume, and one
			// beside the root.
			outside := filepath.Join(filepath.Dir(p.Root()), "outside")
			for _, d := range []string{filepath.Join(p.Root(), "shop-data-pvc-1", "sub"), outside} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"},
				Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{tt.node},
					}}}},
				}}},
			}
			var path string
			if tt.path != nil {
				path = tt.path(p.Root())
				pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: path}
			}
			if got, want := p.ShouldDelete(t.Context(), pv), tt.node == node; got != want {
				t.Errorf("ShouldDelete = %v, want %v", got, want)
			}

			err := p.Delete(t.Context(), pv)
			var ignored *controller.IgnoredError
			switch {
			case tt.removed:
				if err != nil {
					t.Fatalf("Delete: %v", err)
				}
				if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s still exists after Delete (stat: %v)", path, err)
				}
			case tt.ignored:
				if !errors.As(err, &ignored) {
					t.Errorf("Delete: %v, want an IgnoredError", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("Delete: %v, want an error wrapping %q", err, tt.wantErr)
				}
			default:
				if err == nil {
					t.Error("Delete of a volume without hostPath succeeded, want an error")
				}
			}
			if !tt.removed {
				for _, d := range []string{p.Root(), filepath.Join(p.Root(), "shop-data-pvc-1", "sub"), outside} {
					if _, err := os.Stat(d); err != nil {
						t.Errorf("refused Delete removed %s: %v", d, err)
					}
				}
			}
		})
	}
}

func TestShouldProvision(t *testing.T) {
	p := newProvisioner(t)
	for selected, want := range map[string]bool{node: true, "": true, "node-b": false} {
		c := claim("shop", "data")
		if selected != "" {
			c.Annotations = map[string]string{"volume.kubernetes.io/selected-node": selected}
		}
		if got := p.ShouldProvision(t.Context(), c); got != want {
			t.Errorf("ShouldProvision with selected node %q = %v, want %v", selected, got, want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := localpv.New("relative/dir", node); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("New with a relative root: %v, want an error about an absolute path", err)
	}
	if _, err := localpv.New(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "node") {
		t.Errorf("New without a node: %v, want an error about the node name", err)
	}
	root := filepath.Join(t.TempDir(), "a", "b")
	if _, err := localpv.New(root+"/", node); err != nil {
		t.Fatalf("New: %v", err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		t.Errorf("New did not create the root: %v", err)
	}
}

func TestStorageClass(t *testing.T) {
	want := &storagev1.StorageClass{
		TypeMeta: metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "StorageClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        "standard",
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       "opkit.dev/local-path",
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if diff := cmp.Diff(want, localpv.StorageClass(localpv.DefaultProvisionerName)); diff != "" {
		t.Errorf("StorageClass mismatch (-want +got):\n%s", diff)
	}
	want.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{
		Key: "kubernetes.io/hostname", Values: []string{"node-a", "node-b"},
	}}}}
	if diff := cmp.Diff(want, localpv.StorageClass(localpv.DefaultProvisionerName, "node-a", "node-b")); diff != "" {
		t.Errorf("StorageClass with nodes mismatch (-want +got):\n%s", diff)
	}
}
