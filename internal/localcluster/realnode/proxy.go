package realnode

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
)

// kubeProxyConfig configures the one kube-proxy of the real nodes. They
// share this machine's network namespace, so one kube-proxy programs the
// Service rules for all of them (two would fight over the same chains).
//
// Nothing here reaches beyond the bridges: NodePorts answer on PodCIDR
// addresses only, never on localhost (localhostNodePorts off, so
// route_localnet stays 0), and conntrack sysctls are left as they are.
func kubeProxyConfig(kubeconfig string) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               "iptables",
		"clientConnection":   map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride":   node{}.name(),
		"clusterCIDR":        PodCIDR,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"nodePortAddresses":  []string{PodCIDR},
		"iptables":           map[string]any{"localhostNodePorts": false, "masqueradeAll": false},
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0,
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// startKubeProxy writes kube-proxy's configuration and starts it with
// the kubeconfig of its own identity (system:kube-proxy, which the
// built-in system:node-proxier binding authorises).
func startKubeProxy(binDir, kubeconfig string) error {
	conf, err := kubeProxyConfig(kubeconfig)
	if err != nil {
		return err
	}
	path := sharedDir("kube-proxy.json")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		return err
	}
	d := daemon{
		name:    "kube-proxy",
		path:    filepath.Join(binDir, "kube-proxy"),
		args:    []string{"--config=" + path, "--v=1"},
		logFile: sharedDir("logs", "kube-proxy.log"),
	}
	return d.start()
}

// cleanupKubeProxy removes every rule kube-proxy made (kube-proxy
// --cleanup), for Down.
func cleanupKubeProxy(ctx context.Context, binDir string) error {
	return run(ctx, filepath.Join(binDir, "kube-proxy"), "--cleanup", "--v=0")
}
