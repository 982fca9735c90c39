package shard_test

import (
	"net/http"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// ghostLease creates the Lease of member "ghost" of r, holding slots and
// renewed now, with r's lease. No process renews it: the test does, with
// Update.
func ghostLease(t *testing.T, r shard.Ring, slots []int) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.Name + "-ghost", Namespace: r.Namespace, Labels: map[string]string{shard.RingLabel: r.Name},
			Annotations: map[string]string{shard.SlotsAnnotation: shard.FormatSlots(slots)},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       new("ghost"),
			LeaseDurationSeconds: new(int32(r.LeaseDuration / time.Second)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	testkit.Must(t, env.Client.Create(t.Context(), l))
	return l
}

// interceptedConfig is env's config whose requests go through intercept
// first: a non-nil response answers the request, nil sends it on.
func interceptedConfig(intercept func(*http.Request) *http.Response) *rest.Config {
	config := rest.CopyConfig(env.Config)
	config.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if resp := intercept(req); resp != nil {
				return resp, nil
			}
			return rt.RoundTrip(req)
		})
	}
	return config
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
