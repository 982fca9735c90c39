package harness

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
	"github.com/opkit-dev/opkit/internal/repo"
)

// RealNodeSelector pins a pod to the real nodes (WithRealNodes).
var RealNodeSelector = map[string]string{realnode.NodeLabel: "true"}

// Kubectl runs bin/kubectl against the suite's cluster, as a user would,
// and returns its standard output; a failure's error carries its standard
// error.
func Kubectl(ctx context.Context, cfg *envconf.Config, args ...string) (string, error) {
	cmd, err := KubectlCommand(ctx, cfg, args...)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// KubectlCommand returns the command Kubectl runs, for callers that
// stream its output (kubectl port-forward).
func KubectlCommand(ctx context.Context, cfg *envconf.Config, args ...string) (*exec.Cmd, error) {
	bin, err := repo.BinDir()
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", cfg.KubeconfigFile()}, args...)...), nil
}
