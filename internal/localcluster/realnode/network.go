package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// sysctls the nodes need, and the values they are set to. Up records the
// previous values in StateDir and Down puts them back.
//
//   - ip_forward: traffic between pods of two bridges, and to a Service
//     whose endpoint is on the same bridge, is routed by the host. The guard
//     chain keeps it from leaving the machine.
//   - bridge-nf-call-iptables: a pod's reply to another pod on the same
//     bridge must pass kube-proxy's conntrack (DNAT) rules, or a Service
//     reply comes from the wrong address.
//
// They are written as files: procfs only reads them.
var sysctls = []struct{ path, value string }{
	{"/proc/sys/net/ipv4/ip_forward", "1"},
	{"/proc/sys/net/bridge/bridge-nf-call-iptables", "1"},
}

func savedSysctlsPath() string { return filepath.Join(StateDir, "sysctl.json") }

// setSysctls records the current values (once: a second Up keeps the
// first record) and sets the ones the nodes need.
func setSysctls(ctx context.Context) error {
	if _, err := os.Stat(sysctls[1].path); errors.Is(err, os.ErrNotExist) {
		if err := run(ctx, "modprobe", "br_netfilter"); err != nil {
			return fmt.Errorf("%s is missing and br_netfilter cannot be loaded: %w", sysctls[1].path, err)
		}
	}
	if _, err := os.Stat(savedSysctlsPath()); errors.Is(err, os.ErrNotExist) {
		saved := map[string]string{}
		for _, s := range sysctls {
			b, err := os.ReadFile(s.path)
			if err != nil {
				return err
			}
			saved[s.path] = strings.TrimSpace(string(b))
		}
		b, _ := json.Marshal(saved)
		if err := os.WriteFile(savedSysctlsPath(), b, 0o644); err != nil {
			return err
		}
	}
	for _, s := range sysctls {
		if err := os.WriteFile(s.path, []byte(s.value), 0o644); err != nil {
			return fmt.Errorf("setting %s: %w", s.path, err)
		}
	}
	return nil
}

// restoreSysctls puts back the values setSysctls recorded.
func restoreSysctls() error {
	b, err := os.ReadFile(savedSysctlsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var saved map[string]string
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("%s: %w", savedSysctlsPath(), err)
	}
	var errs []error
	for path, v := range saved {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(savedSysctlsPath()))
	}
	return errors.Join(errs...)
}

// addBridge creates node n's bridge with the node's address. Its address
// exists before kwokctl creates the cluster, so the API server's
// certificate names it (kwokctl adds every local address).
func addBridge(ctx context.Context, n node) error {
	if _, err := net.InterfaceByName(n.bridge()); err == nil {
		if err := run(ctx, "ip", "link", "del", n.bridge()); err != nil {
			return err
		}
	}
	if err := run(ctx, "ip", "link", "add", n.bridge(), "type", "bridge"); err != nil {
		return err
	}
	if err := run(ctx, "ip", "addr", "add", fmt.Sprintf("%s/24", n.ip()), "dev", n.bridge()); err != nil {
		return err
	}
	return run(ctx, "ip", "link", "set", n.bridge(), "up")
}

// bridges returns the names of the real-node bridges that exist.
func bridges() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, bridgePrefix) {
			names = append(names, i.Name)
		}
	}
	return names, nil
}

// guardRules keep forwarded traffic between the bridges: nothing from a
// pod is forwarded to an address outside PodCIDR (after kube-proxy's DNAT,
// Service traffic goes to pods or to the host itself, which is not
// forwarding), and nothing from outside is forwarded into a pod.
var guardRules = [][]string{
	{"-i", bridgePrefix + "+", "!", "-d", PodCIDR, "-j", "DROP"},
	{"-o", bridgePrefix + "+", "!", "-s", PodCIDR, "-j", "DROP"},
	{"-i", bridgePrefix + "+", "-j", "ACCEPT"},
	{"-o", bridgePrefix + "+", "-j", "ACCEPT"},
}

// addGuard installs the guard chain first in FORWARD.
func addGuard() error {
	ipt, err := iptables.New()
	if err != nil {
		return err
	}
	removeGuard(ipt)
	if err := ipt.NewChain("filter", guardChain); err != nil {
		return err
	}
	for _, r := range guardRules {
		if err := ipt.Append("filter", guardChain, r...); err != nil {
			return err
		}
	}
	return ipt.Insert("filter", "FORWARD", 1, "-j", guardChain)
}

// removeGuard removes the guard chain and every jump to it; it is quiet
// about what does not exist.
func removeGuard(ipt *iptables.IPTables) {
	for ipt.Delete("filter", "FORWARD", "-j", guardChain) == nil {
	}
	_ = ipt.ClearAndDeleteChain("filter", guardChain)
}

// cniConfig is node n's CNI network: its bridge, host-local addresses from
// its subnet, routes to pods and Services only, no masquerade.
func cniConfig(n node) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "opkit",
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           n.bridge(),
				"isGateway":        true,
				"isDefaultGateway": false,
				"ipMasq":           false,
				"hairpinMode":      true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": n.dir("cni", "ipam"),
					"ranges": [][]map[string]string{{{
						"subnet":     n.subnet().String(),
						"gateway":    n.ip().String(),
						"rangeStart": n.subnet().Addr().Next().Next().String(),
					}}},
					"routes": []map[string]string{{"dst": PodCIDR}, {"dst": ServiceCIDR}},
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}
