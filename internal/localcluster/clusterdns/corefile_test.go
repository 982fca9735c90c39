package clusterdns_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/internal/localcluster/clusterdns"
)

func TestCorefile(t *testing.T) {
	tests := []struct {
		name string
		opts clusterdns.Options
		want string
	}{{
		name: "defaults",
		want: `# Cluster DNS for cluster.local, rendered by clusterdns.Corefile. No forward plugin:
# names outside these zones get NXDOMAIN and never leave the machine.
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
    }
    cache 30
    loadbalance
}
.:53 {
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`,
	}, {
		name: "every option",
		opts: clusterdns.Options{
			BindAddress: "10.244.0.1",
			Port:        1053,
			Domain:      "corp.example.",
			Kubeconfig:  `/var/lib/my "dns"/kubeconfig`,
			HealthAddr:  "127.0.0.1:8080",
			ReadyAddr:   "127.0.0.1:8181",
			LogQueries:  true,
		},
		want: `# Cluster DNS for corp.example, rendered by clusterdns.Corefile. No forward plugin:
# names outside these zones get NXDOMAIN and never leave the machine.
corp.example:1053 in-addr.arpa:1053 ip6.arpa:1053 {
    bind 10.244.0.1
    errors
    log
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes corp.example in-addr.arpa ip6.arpa {
        kubeconfig "/var/lib/my \"dns\"/kubeconfig"
        pods insecure
    }
    cache 30
    loadbalance
}
.:1053 {
    bind 10.244.0.1
    errors
    log
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, clusterdns.Corefile(tt.opts)); diff != "" {
				t.Errorf("Corefile(%+v) mismatch (-want +got):\n%s", tt.opts, diff)
			}
		})
	}
}

func ExampleCorefile() {
	fmt.Print(clusterdns.Corefile(clusterdns.Options{
		BindAddress: "10.244.0.1",
		Kubeconfig:  "/etc/opkit/coredns.kubeconfig",
		ReadyAddr:   "127.0.0.1:8181",
	}))
	// Output:
	// # Cluster DNS for cluster.local, rendered by clusterdns.Corefile. No forward plugin:
	// # names outside these zones get NXDOMAIN and never leave the machine.
	// cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
	//     bind 10.244.0.1
	//     errors
	//     ready 127.0.0.1:8181
	//     kubernetes cluster.local in-addr.arpa ip6.arpa {
	//         kubeconfig "/etc/opkit/coredns.kubeconfig"
	//         pods insecure
	//     }
	//     cache 30
	//     loadbalance
	// }
	// .:53 {
	//     bind 10.244.0.1
	//     errors
	//     template ANY ANY {
	//         rcode NXDOMAIN
	//     }
	// }
}
