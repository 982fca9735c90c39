package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
)

// memberPodWatch polls the member pods of an EtcdCluster while a change
// rolls through them, and keeps the largest number of members seen down at
// once (no pod, a pod being deleted, or a pod not Ready).
type memberPodWatch struct {
	members     []string
	stopPolling func()

	mu      sync.Mutex
	maxDown int
	images  map[string]string // member -> image of its current pod
	trail   []string          // the distinct states seen, in order
}

// watchMemberPods starts polling the pods of the members named in members
// (name -> ID) until stop.
func watchMemberPods(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, cluster string, members map[string]string) *memberPodWatch {
	t.Helper()
	w := &memberPodWatch{images: map[string]string{}}
	for n := range members {
		w.members = append(w.members, n)
	}
	slices.Sort(w.members)
	w.stopPolling = poll(ctx, 250*time.Millisecond, func(ctx context.Context) {
		var pods corev1.PodList
		// A failed list is a missed sample, not a down member.
		if err := cfg.Client().Resources(ns).List(ctx, &pods, resources.WithLabelSelector("etcd.opkit.dev/cluster="+cluster)); err == nil {
			w.sample(pods.Items)
		}
	})
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *memberPodWatch) sample(pods []corev1.Pod) {
	byName := map[string]corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	down := 0
	var state []string
	for _, m := range w.members {
		p, ok := byName[m]
		switch {
		case !ok:
			down++
			delete(w.images, m)
			state = append(state, m+":absent")
			continue
		case p.DeletionTimestamp != nil:
			down++
			state = append(state, m+":deleting")
		case !harness.PodReady(&p):
			down++
			state = append(state, m+":not-ready")
		default:
			state = append(state, m+":ready")
		}
		if len(p.Spec.Containers) > 0 && p.DeletionTimestamp == nil {
			w.images[m] = p.Spec.Containers[0].Image
			state[len(state)-1] += "(" + p.Spec.Containers[0].Image[strings.LastIndexByte(p.Spec.Containers[0].Image, ':')+1:] + ")"
		}
	}
	w.maxDown = max(w.maxDown, down)
	if s := strings.Join(state, " "); len(w.trail) == 0 || w.trail[len(w.trail)-1] != s {
		w.trail = append(w.trail, s)
	}
}

// upgraded returns the members whose pod runs etcd at version (X.Y.Z).
func (w *memberPodWatch) upgraded(version string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.members {
		if strings.HasSuffix(w.images[m], ":v"+version) {
			out = append(out, m)
		}
	}
	return out
}

// stop ends the polling and returns the most members seen down at once
// and the states seen, one line each.
func (w *memberPodWatch) stop() (maxDown int, trail string) {
	w.stopPolling()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxDown, strings.Join(w.trail, "\n")
}

// poll runs f every interval, from now until the returned stop is called
// (or ctx ends); stop waits for a running f and may be called again.
func poll(ctx context.Context, interval time.Duration, f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			f(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		<-stopped
	}
}

// clusterVersion is etcd's cluster version (what every member agreed to
// run, "3.6.0" once all members run 3.6), read from /version of the
// client's first endpoint.
func clusterVersion(ctx context.Context, cli *clientv3.Client) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cli.Endpoints()[0]+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /version: %s", resp.Status)
	}
	var v version.Versions
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("GET /version: %w", err)
	}
	return v.Cluster, nil
}
