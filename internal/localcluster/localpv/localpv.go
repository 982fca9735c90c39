package localpv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

const (
	// DefaultProvisionerName is the provisioner name StorageClasses name to
	// be served by this provisioner, unless --provisioner-name says otherwise.
	DefaultProvisionerName = "opkit.dev/local-path"
	// StorageClassName is the name of the StorageClass StorageClass returns.
	StorageClassName = "standard"
	// DirMode is the mode of every volume directory: writable by any user,
	// so that pods running as non-root can write (hostPath volumes get no
	// fsGroup ownership).
	DirMode fs.FileMode = 0o777
)

var (
	// ErrInvalidName is wrapped by errors about a namespace, claim or volume
	// name that cannot be a single path component (empty, ".", "..", or
	// holding a slash or NUL).
	ErrInvalidName = errors.New("invalid name for a volume directory")
	// ErrOutsideRoot is wrapped by Delete's error for a volume whose path is
	// not a directory directly under the provisioner's root; nothing is
	// removed.
	ErrOutsideRoot = errors.New("volume path is not a directory directly under the provisioner root")
)

// Provisioner creates and deletes volume directories under one root
// directory of one node. It implements controller.Provisioner,
// controller.Qualifier and controller.DeletionGuard. Create it with New.
type Provisioner struct {
	root string
	node string
}

var (
	_ controller.Provisioner   = (*Provisioner)(nil)
	_ controller.Qualifier     = (*Provisioner)(nil)
	_ controller.DeletionGuard = (*Provisioner)(nil)
)

// New returns a Provisioner for node nodeName whose volumes live under root,
// an absolute path it creates if missing.
func New(root, nodeName string) (*Provisioner, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("root %q: must be an absolute path", root)
	}
	if nodeName == "" {
		return nil, errors.New("node name: must not be empty")
	}
	root = filepath.Clean(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("creating root: %w", err)
	}
	return &Provisioner{root: root, node: nodeName}, nil
}

// Root returns the directory volumes are created in.
func (p *Provisioner) Root() string { return p.root }

// Node returns the node this provisioner serves.
func (p *Provisioner) Node() string { return p.node }

// ShouldProvision reports whether the claim is for this node, or selects no
// node at all (which Provision then refuses, so that the misconfiguration
// shows as an event on the claim). Claims selected for other nodes are left
// to their nodes' provisioners.
func (p *Provisioner) ShouldProvision(_ context.Context, claim *corev1.PersistentVolumeClaim) bool {
	n := claim.Annotations[annSelectedNode]
	return n == "" || n == p.node
}

// ShouldDelete reports whether the volume lives on this node.
func (p *Provisioner) ShouldDelete(_ context.Context, pv *corev1.PersistentVolume) bool {
	return volumeNode(pv) == p.node
}

// annSelectedNode is where the scheduler records the node it picked for a
// WaitForFirstConsumer claim.
const annSelectedNode = "volume.kubernetes.io/selected-node"

// Provision creates the claim's directory and returns its PersistentVolume
// (the controller adds the claim reference and creates it). A claim
// selected for another node gets a *controller.IgnoredError, so that the
// controller leaves it to that node's provisioner.
func (p *Provisioner) Provision(_ context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	if claim == nil || class == nil {
		return nil, controller.ProvisioningFinished, errors.New("provision options: PVC and StorageClass are required")
	}
	key := claim.Namespace + "/" + claim.Name
	switch opts.SelectedNodeName {
	case p.node:
	case "":
		return nil, controller.ProvisioningFinished, fmt.Errorf(
			"claim %s has no selected node: StorageClass %s must use volumeBindingMode WaitForFirstConsumer, so that the scheduler picks the node first", key, class.Name)
	default:
		return nil, controller.ProvisioningFinished, &controller.IgnoredError{Reason: fmt.Sprintf(
			"claim %s selected node %q, and this provisioner serves node %q only", key, opts.SelectedNodeName, p.node)}
	}
	if err := checkClaim(claim, class); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("claim %s: %w", key, err)
	}
	for _, n := range []struct{ field, value string }{
		{"namespace", claim.Namespace}, {"claim name", claim.Name}, {"volume name", opts.PVName},
	} {
		if err := checkComponent(n.value); err != nil {
			return nil, controller.ProvisioningFinished, fmt.Errorf("claim %s: %s %q: %w", key, n.field, n.value, err)
		}
	}
	dir := filepath.Join(p.root, claim.Namespace+"-"+claim.Name+"-"+opts.PVName)
	if err := p.checkPath(dir); err != nil { // cannot fail after checkComponent; kept as a guard
		return nil, controller.ProvisioningFinished, fmt.Errorf("claim %s: %w", key, err)
	}
	if err := makeDir(dir); err != nil {
		// Retryable: the next attempt creates or reuses the directory.
		return nil, controller.ProvisioningNoChange, fmt.Errorf("claim %s: %w", key, err)
	}

	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	fsMode := corev1.PersistentVolumeFilesystem
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   claim.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              class.Name,
			VolumeMode:                    &fsMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirOrCreate},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.node},
					}},
				}},
			}},
		},
	}, controller.ProvisioningFinished, nil
}

// Delete removes the volume's directory. It refuses, with an error wrapping
// ErrOutsideRoot, a path that is not a directory directly under the root,
// and ignores (*controller.IgnoredError) volumes of other nodes. A directory
// already gone is not an error.
func (p *Provisioner) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if n := volumeNode(pv); n != p.node {
		return &controller.IgnoredError{Reason: fmt.Sprintf(
			"volume %s is on node %q, and this provisioner serves node %q only", pv.Name, n, p.node)}
	}
	if pv.Spec.HostPath == nil {
		return fmt.Errorf("volume %s: not a hostPath volume", pv.Name)
	}
	dir := pv.Spec.HostPath.Path
	if err := p.checkPath(dir); err != nil {
		return fmt.Errorf("volume %s: %w", pv.Name, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("volume %s: removing %s: %w", pv.Name, dir, err)
	}
	return nil
}

// checkClaim refuses what a hostPath volume cannot honour.
func checkClaim(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	switch {
	case claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode == corev1.PersistentVolumeBlock:
		return errors.New("volumeMode Block is not supported: use Filesystem")
	case claim.Spec.Selector != nil:
		return errors.New("spec.selector is not supported by dynamic provisioning: remove it")
	case claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil:
		return errors.New("spec.dataSource is not supported (no cloning or snapshots): remove it")
	case len(class.MountOptions) > 0:
		return fmt.Errorf("StorageClass %s has mountOptions, which hostPath volumes do not support: remove them", class.Name)
	}
	if _, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		return errors.New("spec.resources.requests.storage is required")
	}
	return nil
}

// checkComponent accepts s only if it is one plain path component.
func checkComponent(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return ErrInvalidName
	}
	return nil
}

// checkPath accepts only an absolute, clean path of a directory directly
// under the root.
func (p *Provisioner) checkPath(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || filepath.Dir(path) != p.root ||
		checkComponent(filepath.Base(path)) != nil {
		return fmt.Errorf("%q is not under %s: %w", path, p.root, ErrOutsideRoot)
	}
	return nil
}

// makeDir creates dir with DirMode, whatever the umask; an existing
// directory (a retried provision) is reused, anything else there refused.
func makeDir(dir string) error {
	err := os.Mkdir(dir, DirMode)
	if errors.Is(err, fs.ErrExist) {
		fi, lerr := os.Lstat(dir)
		if lerr != nil {
			return fmt.Errorf("checking %s: %w", dir, lerr)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
	} else if err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", dir, err)
	}
	return nil
}

// volumeNode returns the node a volume's node affinity requires, or "".
func volumeNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}
