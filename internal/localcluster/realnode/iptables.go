package realnode

import (
	"context"
	"errors"
	"os/exec"
	"strings"
)

// iptablesTables are the tables the kubelet and kube-proxy write to.
var iptablesTables = []string{"filter", "nat", "mangle"}

// iptablesCommands are the IPv4 and IPv6 front ends: the kubelet makes its
// KUBE-FIREWALL and canary chains in both.
var iptablesCommands = []struct{ save, edit string }{{"iptables-save", "iptables"}, {"ip6tables-save", "ip6tables"}}

// ownChain reports whether an iptables chain is one the real nodes made:
// the kubelet's and kube-proxy's KUBE-* chains, and the guard chain. Down
// removes them all: this machine runs no other Kubernetes node.
func ownChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || name == guardChain
}

// iptablesChains returns the real nodes' chains per table, and the rules
// of other chains that jump to them, as iptables-save prints them.
func iptablesChains(ctx context.Context, save, table string) (chains, jumps []string) {
	out, err := exec.CommandContext(ctx, save, "-t", table).Output()
	if err != nil {
		return nil, nil
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && strings.HasPrefix(f[0], ":") && ownChain(f[0][1:]):
			chains = append(chains, f[0][1:])
		case len(f) > 3 && f[0] == "-A" && !ownChain(f[1]) && ownChain(f[len(f)-1]) && (f[len(f)-2] == "-j" || f[len(f)-2] == "-g"):
			jumps = append(jumps, l)
		}
	}
	return chains, jumps
}

// removeChains removes every jump to the real nodes' chains and the chains
// themselves, in both address families and every table.
func removeChains(ctx context.Context) error {
	var errs []error
	for _, c := range iptablesCommands {
		if _, err := exec.LookPath(c.edit); err != nil {
			continue
		}
		for _, table := range iptablesTables {
			chains, jumps := iptablesChains(ctx, c.save, table)
			for _, j := range jumps {
				// "-A CHAIN rule..." deleted as "-D CHAIN rule...": the
				// rule as saved is quoted the way iptables parses it back.
				args := append([]string{"-w", "-t", table, "-D"}, splitRule(strings.TrimPrefix(j, "-A "))...)
				if err := run(ctx, c.edit, args...); err != nil {
					errs = append(errs, err)
				}
			}
			for _, ch := range chains {
				_ = run(ctx, c.edit, "-w", "-t", table, "-F", ch)
			}
			for _, ch := range chains {
				if err := run(ctx, c.edit, "-w", "-t", table, "-X", ch); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// splitRule splits a rule as iptables-save prints it into arguments,
// keeping double-quoted strings (comments) whole.
func splitRule(rule string) []string {
	var args []string
	var cur strings.Builder
	quoted, seen := false, false
	for i := 0; i < len(rule); i++ {
		ch := rule[i]
		switch {
		case ch == '\\' && quoted && i+1 < len(rule):
			i++
			cur.WriteByte(rule[i])
		case ch == '"':
			quoted, seen = !quoted, true
		case ch == ' ' && !quoted:
			if cur.Len() > 0 || seen {
				args = append(args, cur.String())
			}
			cur.Reset()
			seen = false
		default:
			cur.WriteByte(ch)
		}
	}
	if cur.Len() > 0 || seen {
		args = append(args, cur.String())
	}
	return args
}
