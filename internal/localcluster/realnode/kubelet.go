package realnode

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeletPort is the kubelet's API port on its node's address. Each node
// has an address of its own, so every kubelet can use the usual port.
const kubeletPort = 10250

// writeKubeconfig writes a kubeconfig for server that authenticates with
// a client certificate and trusts the cluster CA.
func writeKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// kubeletConfig is node n's KubeletConfiguration, set up as kubeadm sets
// up a node rather than the quickest way that passes:
//
//   - its API (logs, exec, port-forward, metrics) needs a client
//     certificate from the cluster CA or a bearer token, and every request
//     is authorised by the API server (Webhook, SubjectAccessReview); no
//     anonymous access, no read-only port;
//   - it serves with a certificate for its address signed by the cluster
//     CA, which the API server verifies (--kubelet-certificate-authority).
//
// What this VM needs: cgroup v1 (failCgroupV1: false) with the cgroupfs
// driver (no systemd), swap tolerated, a cgroup root and a pod log
// directory per node (kubelets sharing a machine). Images
// cannot be pulled here, so image garbage collection is off.
func kubeletConfig(n node, caFile string) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"address":                  n.ip().String(),
		"port":                     kubeletPort,
		"readOnlyPort":             0,
		"healthzBindAddress":       n.ip().String(),
		"healthzPort":              10248,
		"tlsCertFile":              n.dir("pki", "kubelet-serving.crt"),
		"tlsPrivateKeyFile":        n.dir("pki", "kubelet-serving.key"),
		"rotateCertificates":       false,
		"serverTLSBootstrap":       false,
		"authentication":           map[string]any{"anonymous": map[string]any{"enabled": false}, "webhook": map[string]any{"enabled": true}, "x509": map[string]any{"clientCAFile": caFile}},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": "unix://" + n.containerdSocket(),
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               n.cgroupRoot(),
		"cgroupsPerQOS":            true,
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"clusterDomain":            ClusterDomain,
		"clusterDNS":               []string{DNSAddress().String()},
		"resolvConf":               n.dir("resolv.conf"),
		// Not the shared /var/log/pods: a kubelet deletes the log
		// directories of pods it does not run.
		"podLogsDir":                    n.dir("pod-logs"),
		"staticPodPath":                 "",
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"evictionHard":                  map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		"serializeImagePulls":           false,
		"maxPods":                       110,
		"kubeAPIQPS":                    50,
		"kubeAPIBurst":                  100,
		"registerNode":                  true,
		"enforceNodeAllocatable":        []string{"pods"},
		"localStorageCapacityIsolation": true,
	}
	return json.MarshalIndent(conf, "", "  ")
}

// startKubelet issues node n's certificates, writes its kubeconfig and
// configuration and starts it.
func startKubelet(n node, binDir, server string, authority *ca) error {
	pki := n.dir("pki")
	if err := authority.issue(filepath.Join(pki, "kubelet-client.crt"), filepath.Join(pki, "kubelet-client.key"),
		kubeletIdentity(n.name()), x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := authority.issue(filepath.Join(pki, "kubelet-serving.crt"), filepath.Join(pki, "kubelet-serving.key"),
		pkix.Name{CommonName: "system:node:" + n.name(), Organization: []string{"system:nodes"}}, x509.ExtKeyUsageServerAuth,
		[]net.IP{n.ip().AsSlice()}, []string{n.name()}); err != nil {
		return err
	}
	kubeconfig := n.dir("kubelet.kubeconfig")
	if err := writeKubeconfig(kubeconfig, server, authority.certFile,
		filepath.Join(pki, "kubelet-client.crt"), filepath.Join(pki, "kubelet-client.key"), "system:node:"+n.name()); err != nil {
		return err
	}
	conf, err := kubeletConfig(n, authority.certFile)
	if err != nil {
		return err
	}
	// Pods resolve through cluster DNS only (dnsPolicy ClusterFirst); a
	// pod with dnsPolicy Default gets no name server rather than this
	// machine's, so no lookup leaves the machine.
	files := map[string][]byte{
		n.dir("kubelet.json"): conf,
		n.dir("resolv.conf"):  []byte("# real node: no upstream name servers\n"),
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	if err := makeCgroupRoot(n); err != nil {
		return err
	}
	d := daemon{
		name: "kubelet",
		path: filepath.Join(binDir, "kubelet"),
		args: []string{
			"--config=" + n.dir("kubelet.json"),
			"--kubeconfig=" + kubeconfig,
			"--root-dir=" + n.dir("kubelet"),
			"--cert-dir=" + pki,
			"--hostname-override=" + n.name(),
			"--node-ip=" + n.ip().String(),
			"--node-labels=" + NodeLabel + "=true",
			"--v=1",
		},
		env:     []string{"PATH=" + binDir + ":" + os.Getenv("PATH")},
		logFile: n.dir("logs", "kubelet.log"),
	}
	if err := d.start(); err != nil {
		return fmt.Errorf("node %s: %w", n.name(), err)
	}
	return nil
}
