// Package clusterdns renders the Corefile of the local cluster's DNS server:
// the CoreDNS binary that `make coredns` builds from hack/tools/coredns, run
// on the host for pods on real nodes.
//
// The server is authoritative for the cluster domain (default
// cluster.local) and the reverse zones, answering from Services,
// EndpointSlices and pod IPs through CoreDNS's kubernetes plugin:
//
//	web.shop.svc.cluster.local          the ClusterIP of Service shop/web
//	etcd-0.etcd.shop.svc.cluster.local  the endpoint with hostname etcd-0 of
//	                                    headless Service shop/etcd
//	10-244-0-7.shop.pod.cluster.local   10.244.0.7 (pods insecure)
//
// Every other name gets NXDOMAIN from the server itself. The binary has no
// forward plugin at all, so no query ever leaves the machine; pods that need
// the internet do not get it from cluster DNS.
//
// The caller starts the process:
//
//	os.WriteFile(path, []byte(clusterdns.Corefile(clusterdns.Options{
//		BindAddress: "10.244.0.1",
//		Kubeconfig:  kubeconfig,
//		HealthAddr:  "127.0.0.1:8080",
//		ReadyAddr:   "127.0.0.1:8181",
//	})), 0o644)
//	exec.Command(coredns, "-conf", path)
//
// and points the kubelet at it with clusterDNS: [BindAddress] and
// clusterDomain: Domain.
//
// Footguns:
//   - Wait for a DNS answer, not for /ready: CoreDNS 1.14 can answer 200 on
//     ReadyAddr before its DNS listeners are up. Resolving
//     kubernetes.default.svc.<Domain> proves both the listener and the
//     kubernetes plugin's sync (the listeners start after the sync, or after
//     5 s without it).
//   - An empty BindAddress makes CoreDNS listen on every address of the
//     host, and the port (53 by default) needs CAP_NET_BIND_SERVICE or root.
//   - Answers are cached for up to CacheSeconds.
package clusterdns
