// Command coredns is CoreDNS built with only the plugins a local cluster's DNS
// needs: it answers for the cluster domain from the Kubernetes API and for
// nothing else. There is deliberately no forward plugin, so no query ever
// leaves the machine.
//
// hack/install-tool.sh builds it (`make coredns`); nothing imports this module.
// internal/localcluster/clusterdns renders the Corefile it runs with.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, in the order of directives below.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"
)

// directives are the plugins a Corefile may use, in execution order: the
// subsequence of CoreDNS's plugin.cfg (core/dnsserver/zdirectives.go) for the
// plugins imported above. A Corefile naming any other plugin fails to load.
var directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"template",
	"kubernetes",
}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
