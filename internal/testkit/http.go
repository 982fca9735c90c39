package testkit

import (
	"context"
	"net/http"
)

// HTTPOK reports whether a GET of url answers 200 OK before ctx ends, as a
// kubelet's HTTP probe asks: for waiting on a server's readiness endpoint
// (etcd's /readyz, CoreDNS's /ready). Any error is a false.
func HTTPOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
