package realnode

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// iptablesTables are the tables the kubelet and kube-proxy write to.
var iptablesTables = []string{"filter", "nat", "mangle"}

// iptablesFamilies are the IPv4 and IPv6 front ends: the kubelet makes its
// KUBE-FIREWALL and canary chains in both. A family whose command is
// missing is skipped.
func iptablesFamilies() map[string]*iptables.IPTables {
	fams := map[string]*iptables.IPTables{}
	for name, p := range map[string]iptables.Protocol{"iptables": iptables.ProtocolIPv4, "ip6tables": iptables.ProtocolIPv6} {
		if ipt, err := iptables.New(iptables.IPFamily(p)); err == nil {
			fams[name] = ipt
		}
	}
	return fams
}

// ownChain reports whether an iptables chain is one the real nodes made:
// the kubelet's and kube-proxy's KUBE-* chains, and the guard chain. Down
// removes them all: this machine runs no other Kubernetes node.
func ownChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || name == guardChain
}

// jump is a rule of another chain that jumps to one of ours: rule number
// id of chain (iptables -S numbering), as -S prints it.
type jump struct {
	chain string
	id    int
	rule  string
}

// ownRules returns the real nodes' chains in table, and the rules of other
// chains that jump to them.
func ownRules(ipt *iptables.IPTables, table string) (chains []string, jumps []jump, err error) {
	all, err := ipt.ListChains(table)
	if err != nil {
		return nil, nil, err
	}
	for _, ch := range all {
		if ownChain(ch) {
			chains = append(chains, ch)
			continue
		}
		rules, err := ipt.List(table, ch)
		if err != nil {
			return nil, nil, err
		}
		// rules[0] is the chain's -P or -N line; rule n is rules[n].
		for id, r := range rules {
			f := strings.Fields(r)
			if id > 0 && len(f) > 3 && ownChain(f[len(f)-1]) && (f[len(f)-2] == "-j" || f[len(f)-2] == "-g") {
				jumps = append(jumps, jump{chain: ch, id: id, rule: r})
			}
		}
	}
	return chains, jumps, nil
}

// removeChains removes every jump to the real nodes' chains and the chains
// themselves, in both address families and every table.
func removeChains() error {
	var errs []error
	for name, ipt := range iptablesFamilies() {
		for _, table := range iptablesTables {
			chains, jumps, err := ownRules(ipt, table)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s -t %s: %w", name, table, err))
				continue
			}
			// Last first, so that the numbers of the rest stay right.
			slices.Reverse(jumps)
			for _, j := range jumps {
				if err := ipt.DeleteById(table, j.chain, j.id); err != nil {
					errs = append(errs, err)
				}
			}
			// Flushed first: our chains jump to one another.
			for _, ch := range chains {
				_ = ipt.ClearChain(table, ch)
			}
			for _, ch := range chains {
				if err := ipt.DeleteChain(table, ch); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}
