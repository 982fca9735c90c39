package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// series is one sample of the Prometheus text format: name, labels, value.
type series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// snapshot is one scrape of the operator's metrics endpoint, keyed by the
// series' text (name{labels}).
type snapshot map[string]series

func scrape(ctx context.Context, url string) (snapshot, error) {
	return scrapeWith(ctx, http.DefaultClient, url)
}

// scrapeWith is scrape through hc (e.g. authenticated to the API server).
func scrapeWith(ctx context.Context, hc *http.Client, url string) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	snap := snapshot{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s, key, ok := parseLine(line)
		if ok {
			snap[key] = s
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	return snap, nil
}

// parseLine parses `name{k="v",...} value [timestamp]`.
func parseLine(line string) (series, string, bool) {
	s := series{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, "", false
	}
	s.Name = line[:i]
	rest := line[i:]
	key := s.Name
	if rest[0] == '{' {
		end := -1
		inQuote := false
		for j := 1; j < len(rest); j++ {
			switch c := rest[j]; {
			case c == '\\' && inQuote:
				j++
			case c == '"':
				inQuote = !inQuote
			case c == '}' && !inQuote:
				end = j
			}
			if end >= 0 {
				break
			}
		}
		if end < 0 {
			return s, "", false
		}
		key += rest[:end+1]
		for _, kv := range splitLabels(rest[1:end]) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			s.Labels[k] = v
		}
		rest = rest[end+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, "", false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, "", false
	}
	s.Value = v
	return s, key, true
}

// splitLabels splits `a="x",b="y"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if inQuote {
				i++
			}
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// delta returns after - before for every series of after (counters).
func delta(before, after snapshot) snapshot {
	d := snapshot{}
	for k, s := range after {
		s.Value -= before[k].Value
		d[k] = s
	}
	return d
}

// sum adds the series named name whose labels include match.
func (s snapshot) sum(name string, match map[string]string) float64 {
	var t float64
	for _, x := range s {
		if x.Name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if x.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			t += x.Value
		}
	}
	return t
}

// by sums the series named name by the value of one label.
func (s snapshot) by(name, label string) map[string]float64 {
	m := map[string]float64{}
	for _, x := range s {
		if x.Name == name && x.Value != 0 {
			m[x.Labels[label]] += x.Value
		}
	}
	return m
}

const requestsMetric = "rest_client_requests_total"

// requests summarises the operator's API requests between two snapshots.
type requests struct {
	ByMethod  map[string]float64 `json:"byMethod"`
	ByCode    map[string]float64 `json:"byCode"`
	Total     float64            `json:"total"`
	Writes    float64            `json:"writes"`
	Conflicts float64            `json:"conflicts"`
	// Reconciles counts controller-runtime's passes of the memcached
	// controller; Outcomes and StatusWrites are opkit's counters.
	Reconciles   float64            `json:"reconciles"`
	Outcomes     map[string]float64 `json:"outcomes"`
	StatusWrites map[string]float64 `json:"statusWrites"`
}

func summarise(d snapshot) requests {
	r := requests{
		ByMethod:     d.by(requestsMetric, "method"),
		ByCode:       d.by(requestsMetric, "code"),
		Total:        d.sum(requestsMetric, nil),
		Conflicts:    d.sum(requestsMetric, map[string]string{"code": "409"}),
		Reconciles:   d.sum("controller_runtime_reconcile_total", map[string]string{"controller": "memcached"}),
		Outcomes:     d.by("opkit_reconcile_outcomes_total", "outcome"),
		StatusWrites: d.by("opkit_status_writes_total", "result"),
	}
	for m, v := range r.ByMethod {
		if isWrite(m) {
			r.Writes += v
		}
	}
	return r
}

// apiserverRequestsMetric counts the requests the API server served, from
// every client: the benchmark, the operator, the controller-manager, the
// scheduler and kwok.
const apiserverRequestsMetric = "apiserver_request_total"

// clusterWrites is the write requests the API server served between two
// snapshots of its metrics, keyed by resource[/subresource].
func clusterWrites(d snapshot) map[string]float64 {
	out := map[string]float64{}
	for _, x := range d {
		if x.Name != apiserverRequestsMetric || x.Value == 0 || !isWrite(x.Labels["verb"]) {
			continue
		}
		r := x.Labels["resource"]
		if sub := x.Labels["subresource"]; sub != "" {
			r += "/" + sub
		}
		out[r] += x.Value
	}
	return out
}

func isWrite(method string) bool {
	switch strings.ToUpper(method) {
	case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		return true
	}
	return false
}

// methods formats counts per method, divided by n, in a stable order.
func methods(m map[string]float64, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, num(m[k]/float64(n))))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// memory reads VmHWM, the peak resident set of pid, in bytes.
func memory(pid int) (hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) < 1 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[0], 10, 64)
		if k == "VmHWM" {
			hwm = kb << 10
		}
	}
	return hwm, sc.Err()
}
