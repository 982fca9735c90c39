// Package securemetrics configures a controller-runtime manager's metrics
// endpoint the way an operator running in a shared cluster needs it: over
// HTTPS, answering only clients whose bearer token the API server
// authenticates and authorises to get the /metrics URL.
//
// An operator's metrics show which objects it manages, how often it fails
// and how long its API calls take. Served over plain HTTP on a pod IP, they
// are readable by every pod in the cluster. ServerOptions returns the
// metrics server options that close that:
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
//		Metrics: securemetrics.ServerOptions(":8443", secure),
//	})
//
// # What the operator and its scrapers need
//
// Every scrape costs the operator a TokenReview and a SubjectAccessReview.
// Its ServiceAccount must be allowed to create both; these markers in its
// controller package make controller-gen grant that:
//
//	// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
//	// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
//
// Without them every scrape answers 500. A scraper needs a ClusterRole with
//
//	rules:
//	- nonResourceURLs: ["/metrics"]
//	  verbs: ["get"]
//
// bound to its ServiceAccount. Any other valid token gets 403; no token, or
// one the API server does not authenticate, 401; a review the API server
// could not answer, after retries, 500: alert on scrape failures, not on
// 401s only. The answers are cached (AuthFilter has the times), so a scrape
// costs the two reviews once every few minutes, not every time.
//
// AuthFilter is the filter itself, for an operator that builds its own
// metricsserver.Options. It does the work of controller-runtime's
// filters.WithAuthenticationAndAuthorization with client-go's review
// clients only; that filter links k8s.io/apiserver, which made the memcached
// example's executable 78 MB instead of 49 MB and its resident memory 18 MB
// larger before it had read a single object.
//
// # Footguns
//
//   - The certificate is self-signed and generated at start, in memory: a
//     scraper must skip verification (Prometheus: tls_config
//     insecure_skip_verify) unless you mount a certificate and set
//     metricsserver.Options.CertDir on the returned options.
//   - HTTP/2 is off. Its rapid-reset and stream-cancellation attacks
//     (CVE-2023-44487, CVE-2023-39325) need no authentication, so the
//     filter would not stop them.
//   - secure=false is for an operator run on a workstation against a test
//     cluster: plain HTTP, to anyone who can reach the address.
//   - A revoked token or RoleBinding keeps its access for as long as the
//     cached answer lives: up to a minute for the token, five for the
//     permission.
package securemetrics
