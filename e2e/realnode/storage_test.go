package realnode

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
)

// TestVolumeSurvivesPodRestart: a PVC with no PV made in advance binds
// through the default StorageClass when a real pod uses it, and what one
// pod wrote there is read by the next pod on the same claim.
func TestVolumeSurvivesPodRestart(t *testing.T) {
	t.Parallel() // each suite has a namespace of its own (main_test.go)
	const ns = "storage-real"
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}
	withClaim := func(name string) *corev1.Pod {
		p := realPod(ns, name, toolboxImage, "sleep")
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	const text = "written before the restart"
	setup, teardown := namespace(ns)

	f := features.New("a dynamically provisioned volume").Setup(setup).Teardown(teardown).
		Assess("the claim binds and the first pod writes to it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			first := withClaim("writer")
			create(ctx, t, cfg, claim, first)
			waitPodReady(ctx, t, cfg, ns, first.Name)
			var got corev1.PersistentVolumeClaim
			if err := cfg.Client().Resources().Get(ctx, claim.Name, ns, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != corev1.ClaimBound || got.Spec.VolumeName == "" {
				t.Fatalf("claim is %s (volume %q), want Bound", got.Status.Phase, got.Spec.VolumeName)
			}
			execIn(ctx, t, cfg, ns, first.Name, "toolbox", "write", "/data/note", text)
			if err := cfg.Client().Resources().Delete(ctx, first); err != nil {
				t.Fatal(err)
			}
			waitGone(ctx, t, cfg, first)
			return ctx
		}).
		Assess("a new pod on the same claim reads it back", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			second := withClaim("reader")
			create(ctx, t, cfg, second)
			waitPodReady(ctx, t, cfg, ns, second.Name)
			if got := execIn(ctx, t, cfg, ns, second.Name, "toolbox", "cat", "/data/note"); got != text {
				t.Errorf("the second pod read %q, want %q", got, text)
			}
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}
