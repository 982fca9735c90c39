package testenv

import (
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Counter counts the HTTP requests a client sends to the API server, by
// method. Reset it between phases of a test.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
	paths  []string
}

// Reset forgets every request counted so far.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = nil
	c.paths = nil
}

// Counts returns the requests counted since the last Reset, by HTTP method.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Writes returns the number of POST, PUT, PATCH and DELETE requests.
func (c *Counter) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[http.MethodPost] + c.counts[http.MethodPut] + c.counts[http.MethodPatch] + c.counts[http.MethodDelete]
}

// WritesTo returns the number of write requests whose URL path contains
// substr, e.g. "/widgets" or "/configmaps".
func (c *Counter) WritesTo(substr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.paths {
		if strings.Contains(p, substr) {
			n++
		}
	}
	return n
}

// Total returns the number of requests of any method.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// String lists the counted write requests, for failure messages.
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.counts))
	for k := range c.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c.counts[k]))
	}
	return strings.Join(parts, " ") + "; writes: " + strings.Join(c.paths, ", ")
}

func (c *Counter) observe(r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[r.Method]++
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.paths = append(c.paths, r.Method+" "+r.URL.Path)
	}
}

type countingTransport struct {
	next    http.RoundTripper
	counter *Counter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.counter.observe(r)
	return t.next.RoundTrip(r)
}

// CountingConfig returns a copy of the environment's rest.Config whose
// requests are counted by the returned Counter.
func (e *Env) CountingConfig() (*rest.Config, *Counter) {
	cfg := rest.CopyConfig(e.Config)
	counter := &Counter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, counter: counter}
	})
	return cfg, counter
}

// CountingClient returns a direct client whose requests are counted.
func (e *Env) CountingClient() (client.Client, *Counter, error) {
	cfg, counter := e.CountingConfig()
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("building counting client: %w", err)
	}
	return c, counter, nil
}
