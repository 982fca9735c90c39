package harness

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
)

// PodReady reports the pod's Ready condition: every container passes its
// readiness probe, so Services send it traffic.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DescribePod summarises why a pod is not ready, for failure messages:
// phase, node, the conditions that are not true, and each container that
// waits or has terminated, with the reason.
func DescribePod(p *corev1.Pod) string {
	parts := []string{"phase " + string(p.Status.Phase), "node " + p.Spec.NodeName}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("%s terminated: %s (exit %d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
		}
	}
	return strings.Join(parts, "; ")
}

// DescribePods summarises every pod of a namespace with DescribePod, for
// failure messages.
func DescribePods(ctx context.Context, cfg *envconf.Config, ns string) string {
	var pods corev1.PodList
	if err := cfg.Client().Resources(ns).List(ctx, &pods); err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pods.Items {
		parts = append(parts, p.Name+": "+DescribePod(&p))
	}
	return strings.Join(parts, " | ")
}

// RealNodeDNSLog returns the last lines of the real nodes' CoreDNS log
// (every query and its answer) that contain match, for the failure
// messages of lookups.
func RealNodeDNSLog(match string, lines int) string {
	b, err := os.ReadFile(realnode.DNSLog())
	if err != nil {
		return err.Error()
	}
	var found []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, match) {
			found = append(found, strings.TrimRight(line, "\n"))
		}
	}
	return fmt.Sprintf("%s, the last %d lines with %q:\n%s", realnode.DNSLog(), lines, match, strings.Join(found[max(len(found)-lines, 0):], "\n"))
}
