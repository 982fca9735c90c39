package realnode

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestKwokctlConfig: the API server reaches kubelets by InternalIP with a
// client certificate and verifies theirs, advertises node 0's address,
// and kwok manages only its own fake nodes.
func TestKwokctlConfig(t *testing.T) {
	var got struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Options    struct {
			SANs []string `json:"kubeApiserverCertSANs"`
		} `json:"options"`
		Patches []struct {
			Name string `json:"name"`
			Args []struct {
				Key      string `json:"key"`
				Value    string `json:"value"`
				Override bool   `json:"override"`
			} `json:"extraArgs"`
		} `json:"componentsPatches"`
	}
	if err := yaml.UnmarshalStrict(KwokctlConfig("/pki"), &got); err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, p := range got.Patches {
		for _, a := range p.Args {
			key := p.Name + " --" + a.Key
			if a.Override {
				key += " (override)"
			}
			args[key] = a.Value
		}
	}
	want := map[string]string{
		"kube-apiserver --kubelet-preferred-address-types":        "InternalIP",
		"kube-apiserver --kubelet-client-certificate":             "/pki/admin.crt",
		"kube-apiserver --kubelet-client-key":                     "/pki/admin.key",
		"kube-apiserver --kubelet-certificate-authority":          "/pki/ca.crt",
		"kube-apiserver --advertise-address":                      "10.244.0.1",
		"kwok-controller --manage-all-nodes (override)":           "false",
		"kwok-controller --manage-nodes-with-annotation-selector": "kwok.x-k8s.io/node=fake",
	}
	if diff := cmp.Diff(want, args); diff != "" {
		t.Errorf("component args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.0.0.1", "10.244.0.1"}, got.Options.SANs); diff != "" {
		t.Errorf("API server certificate SANs (-want +got):\n%s", diff)
	}
	if got.APIVersion != "config.kwok.x-k8s.io/v1alpha1" || got.Kind != "KwokctlConfiguration" {
		t.Errorf("apiVersion/kind = %s/%s, want config.kwok.x-k8s.io/v1alpha1/KwokctlConfiguration", got.APIVersion, got.Kind)
	}
}

// TestCNIConfigHasNoRouteOffTheMachine: pods get routes to pods and
// Services only, through their node's bridge, and are not masqueraded.
func TestCNIConfigHasNoRouteOffTheMachine(t *testing.T) {
	for _, i := range []int{0, 1, 7} {
		n := node{index: i}
		b, err := cniConfig(n)
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []struct {
				Type             string `json:"type"`
				Bridge           string `json:"bridge"`
				IsDefaultGateway bool   `json:"isDefaultGateway"`
				IPMasq           bool   `json:"ipMasq"`
				IPAM             struct {
					Ranges [][]map[string]string `json:"ranges"`
					Routes []map[string]string   `json:"routes"`
				} `json:"ipam"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatal(err)
		}
		if len(conf.Plugins) != 1 {
			t.Fatalf("node %d: %d plugins, want the bridge alone", i, len(conf.Plugins))
		}
		p := conf.Plugins[0]
		if p.IsDefaultGateway || p.IPMasq || p.Bridge != n.bridge() {
			t.Errorf("node %d: bridge %q isDefaultGateway=%v ipMasq=%v, want %q, false, false", i, p.Bridge, p.IsDefaultGateway, p.IPMasq, n.bridge())
		}
		if diff := cmp.Diff([]map[string]string{{"dst": PodCIDR}, {"dst": ServiceCIDR}}, p.IPAM.Routes); diff != "" {
			t.Errorf("node %d routes (-want +got):\n%s", i, diff)
		}
		r := p.IPAM.Ranges[0][0]
		if want := n.subnet().String(); r["subnet"] != want || r["gateway"] != n.ip().String() {
			t.Errorf("node %d range %v, want subnet %s gateway %s", i, r, want, n.ip())
		}
	}
}

// TestKubeletConfigIsAuthenticated: no anonymous access, no read-only
// port, requests authorised by the API server.
func TestKubeletConfigIsAuthenticated(t *testing.T) {
	b, err := kubeletConfig(node{index: 2}, "/pki/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"anonymous":     conf["authentication"].(map[string]any)["anonymous"],
		"webhook":       conf["authentication"].(map[string]any)["webhook"],
		"clientCAFile":  conf["authentication"].(map[string]any)["x509"].(map[string]any)["clientCAFile"],
		"authorization": conf["authorization"],
		"readOnlyPort":  conf["readOnlyPort"],
		"address":       conf["address"],
		"cgroupRoot":    conf["cgroupRoot"],
	}
	want := map[string]any{
		"anonymous":     map[string]any{"enabled": false},
		"webhook":       map[string]any{"enabled": true},
		"clientCAFile":  "/pki/ca.crt",
		"authorization": map[string]any{"mode": "Webhook"},
		"readOnlyPort":  float64(0),
		"address":       "10.244.2.1",
		"cgroupRoot":    "/opkit-real-node-2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubelet configuration (-want +got):\n%s", diff)
	}
}

// TestKubeletsKeepTheirPodLogsApart: kubelets on one machine must not share
// a pod log directory. Each deletes, every minute, the log directories of
// the pods it does not run: with /var/log/pods shared, kubectl logs of a
// pod on the other node comes back empty (found by e2e/incluster, whose
// checks read the operators' logs).
func TestKubeletsKeepTheirPodLogsApart(t *testing.T) {
	dirs := map[string]int{}
	for i := range 3 {
		b, err := kubeletConfig(node{index: i}, "/pki/ca.crt")
		if err != nil {
			t.Fatal(err)
		}
		var conf map[string]any
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatal(err)
		}
		dir, _ := conf["podLogsDir"].(string)
		if !strings.HasPrefix(dir, node{index: i}.dir()+"/") {
			t.Errorf("node %d: podLogsDir %q, want a directory of its own under %s", i, dir, node{index: i}.dir())
		}
		dirs[dir]++
	}
	if len(dirs) != 3 {
		t.Errorf("pod log directories of 3 nodes: %v", dirs)
	}
}

// TestContainerdConfig: what this VM needs is set, and the node's state
// stays under its own directories.
func TestContainerdConfig(t *testing.T) {
	conf := containerdConfig(node{index: 1}, "/usr/sbin/runc")
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`Root = "/run/opkit/realnode/real-node-1/runc"`,
		`root = "/var/lib/opkit/realnode/real-node-1/containerd"`,
		`state = "/run/opkit/realnode/real-node-1/containerd"`,
		`address = "/run/opkit/realnode/real-node-1/containerd.sock"`,
		`sandbox = "registry.k8s.io/pause:3.10"`,
		`BinaryName = "/usr/sbin/runc"`,
		"SystemdCgroup = false",
		`config_path = "/var/lib/opkit/realnode/real-node-1/certs.d"`,
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, conf)
		}
	}
}

func TestRegistryRef(t *testing.T) {
	for ref, want := range map[string]string{
		"docker.io/library/memcached:1.6":      RegistryAddress + "/library/memcached:1.6",
		"memcached:1.6":                        RegistryAddress + "/library/memcached:1.6",
		"opkit.dev/etcd-operator:next":         RegistryAddress + "/etcd-operator:next",
		"gcr.io/etcd-development/etcd:v3.6.16": RegistryAddress + "/etcd-development/etcd:v3.6.16",
	} {
		if got, err := RegistryRef(ref); err != nil || got.String() != want {
			t.Errorf("RegistryRef(%q) = %v, %v; want %s", ref, got, err, want)
		}
	}
}

func TestNodeIndex(t *testing.T) {
	tests := map[string]struct {
		i  int
		ok bool
	}{
		"real-node-0":  {0, true},
		"real-node-12": {12, true},
		"real-node-01": {},
		"real-node--1": {},
		"real-node-":   {},
		"kwok-node-0":  {},
		"real-node-1x": {},
		"xreal-node-1": {},
	}
	for name, want := range tests {
		if i, ok := NodeIndex(name); i != want.i || ok != want.ok {
			t.Errorf("NodeIndex(%q) = %d, %t, want %d, %t", name, i, ok, want.i, want.ok)
		}
	}
}
