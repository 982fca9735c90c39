package securemetrics_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/securemetrics"
)

// TestServerOptionsSecure starts a manager with ServerOptions(addr, true)
// against a real API server and scrapes it as a user of the cluster would:
// only a token allowed to get /metrics reads them, over HTTP/1.1.
func TestServerOptionsSecure(t *testing.T) {
	ctx := t.Context()
	const ns = "default"
	cs, err := kubernetes.NewForConfig(env.Config)
	testkit.Must(t, err)
	reader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "securemetrics-test-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	testkit.Must(t, env.Client.Create(ctx, reader))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), reader) })
	token := func(sa string, bound bool) string {
		t.Helper()
		testkit.Must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
		if bound {
			b := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "securemetrics-test-" + sa},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
			}
			testkit.Must(t, env.Client.Create(ctx, b))
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), b) })
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		testkit.Must(t, err)
		return tr.Status.Token
	}
	allowed, denied := token("scraper", true), token("bystander", false)

	addr := "127.0.0.1:" + strconv.Itoa(testkit.MustFreePort(t))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: securemetrics.ServerOptions(addr, true)})
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The certificate is self-signed; offer HTTP/2 to see it refused.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}, //nolint:gosec // the server's certificate is self-signed by design
		ForceAttemptHTTP2: true,
	}}
	scrape := func(token string) (int, string, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, "", "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Proto, string(body), err
	}
	// The server starts with the manager; the authorisation of a new
	// binding may take a moment too.
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _, _, err := scrape(allowed)
		last = fmt.Sprint(code, err)
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the allowed token never got 200: last %s", last)
	}

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"token allowed to get /metrics", allowed, http.StatusOK},
		{"token of another ServiceAccount", denied, http.StatusForbidden},
		// The API server does not authenticate it: 401, like no token.
		{"invalid token", "not-a-token", http.StatusUnauthorized},
		{"no token", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, proto, body, err := scrape(tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("status %d, want %d (body %.200q)", code, tc.want, body)
			}
			if proto != "HTTP/1.1" {
				t.Errorf("protocol %s, want HTTP/1.1 (HTTP/2 must be off)", proto)
			}
			if tc.want == http.StatusOK && len(body) == 0 {
				t.Error("empty metrics body")
			}
		})
	}
}

// TestServerOptionsInsecure: secure=false is plain HTTP with no filter.
func TestServerOptionsInsecure(t *testing.T) {
	got := securemetrics.ServerOptions(":8080", false)
	if got.SecureServing || got.FilterProvider != nil || len(got.TLSOpts) != 0 || got.BindAddress != ":8080" {
		t.Errorf("ServerOptions(:8080, false) = %+v, want plain HTTP on :8080", got)
	}
}
