package shard_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
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

// widgetPerSlot creates one Widget per slot of r in r's namespace,
// labelled as the Sharder would, in slot order.
func widgetPerSlot(t *testing.T, r shard.Ring) []*testv1.Widget {
	t.Helper()
	var widgets []*testv1.Widget
	for i := 0; len(widgets) < r.Slots; i++ {
		key := client.ObjectKey{Namespace: r.Namespace, Name: fmt.Sprintf("w-%d", i)}
		if r.Slot(key) != len(widgets) {
			continue
		}
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: r.Namespace,
			Labels: map[string]string{r.SlotLabel(): strconv.Itoa(len(widgets))}}}
		testkit.Must(t, env.Client.Create(t.Context(), w))
		widgets = append(widgets, w)
	}
	return widgets
}

// heldLists holds, once hold is called, the ConfigMap lists (and watches
// that list first) of the config heldListsConfig returns, until release:
// a cache started meanwhile cannot sync.
type heldLists struct {
	held     atomic.Bool
	lists    chan struct{}
	released sync.Once
}

func (h *heldLists) hold()    { h.held.Store(true) }
func (h *heldLists) release() { h.released.Do(func() { close(h.lists) }) }

// heldListsConfig is env's config whose ConfigMap lists h holds.
func heldListsConfig() (*rest.Config, *heldLists) {
	h := &heldLists{lists: make(chan struct{})}
	return interceptedConfig(func(req *http.Request) *http.Response {
		q := req.URL.Query() // a list, or a watch that lists first
		listing := q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"
		if h.held.Load() && req.Method == http.MethodGet && listing && strings.HasSuffix(req.URL.Path, "/configmaps") {
			select {
			case <-h.lists:
			case <-req.Context().Done():
			}
		}
		return nil
	}), h
}
