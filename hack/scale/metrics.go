package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// series is one sample of a scrape: name, labels, value.
type series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// snapshot is one scrape of a metrics endpoint, keyed by the series' text
// (name{labels}). Histograms and summaries appear as their _bucket, _sum
// and _count series.
type snapshot map[string]series

func scrape(ctx context.Context, url string) (snapshot, error) {
	return scrapeWith(ctx, http.DefaultClient, url)
}

// scrapeWith is scrape through hc (e.g. authenticated to the API server).
// It parses what the endpoint serves (Prometheus text or protobuf) with
// prometheus/common's expfmt.
func scrapeWith(ctx context.Context, hc *http.Client, url string) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	dec := &expfmt.SampleDecoder{
		Dec:  expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header)),
		Opts: &expfmt.DecodeOptions{Timestamp: model.Now()},
	}
	snap := snapshot{}
	for {
		var v model.Vector
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return snap, nil
			}
			return nil, fmt.Errorf("reading %s: %w", url, err)
		}
		for _, smp := range v {
			labels := make(map[string]string, len(smp.Metric))
			for k, lv := range smp.Metric {
				if k != model.MetricNameLabel {
					labels[string(k)] = string(lv)
				}
			}
			snap[smp.Metric.String()] = series{Name: string(smp.Metric[model.MetricNameLabel]), Labels: labels, Value: float64(smp.Value)}
		}
	}
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
	// Reconciles counts controller-runtime's passes (each operator runs
	// one controller); Outcomes and StatusWrites are opkit's counters.
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
		Reconciles:   d.sum("controller_runtime_reconcile_total", nil),
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

// apiKind is the API server's account of one kind of request.
type apiKind struct {
	Count float64 `json:"count"`
	// Seconds is the sum of the request durations the API server
	// measured (apiserver_request_duration_seconds): time in its handlers,
	// which on a CPU-bound control plane is mostly CPU.
	Seconds float64 `json:"seconds"`
}

// apiKinds is the requests the API server served between two snapshots
// of its metrics, by "VERB resource[/subresource]". Watches are left out:
// their duration is how long they stayed open.
func apiKinds(d snapshot) map[string]apiKind {
	out := map[string]apiKind{}
	for _, x := range d {
		verb := x.Labels["verb"]
		if x.Value == 0 || verb == "WATCH" || verb == "WATCHLIST" || verb == "CONNECT" {
			continue
		}
		key := verb + " " + x.Labels["resource"]
		if sub := x.Labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		switch x.Name {
		case apiserverRequestsMetric:
			k := out[key]
			k.Count += x.Value
			out[key] = k
		case "apiserver_request_duration_seconds_sum":
			k := out[key]
			k.Seconds += x.Value
			out[key] = k
		}
	}
	return out
}

// admissionWebhooks is the calls the API server made to admission
// webhooks between two snapshots of its metrics, by "name OPERATION", and
// the seconds it waited for them.
func admissionWebhooks(d snapshot) map[string]apiKind {
	return histograms(d, "apiserver_admission_webhook_admission_duration_seconds", func(l map[string]string) string {
		return l["name"] + " " + l["operation"]
	})
}

// webhookHandlers is the requests an operator's webhook server handled
// between two snapshots of its metrics, by path, and the seconds its
// handlers took.
func webhookHandlers(d snapshot) map[string]apiKind {
	return histograms(d, "controller_runtime_webhook_latency_seconds", func(l map[string]string) string { return l["webhook"] })
}

// histograms is the count and sum of the histogram name in d, added up by
// key.
func histograms(d snapshot, name string, key func(map[string]string) string) map[string]apiKind {
	out := map[string]apiKind{}
	for _, x := range d {
		if x.Value == 0 || (x.Name != name+"_count" && x.Name != name+"_sum") {
			continue
		}
		id := key(x.Labels)
		h := out[id]
		if x.Name == name+"_count" {
			h.Count += x.Value
		} else {
			h.Seconds += x.Value
		}
		out[id] = h
	}
	return out
}

// watchEvents is the watch events the API server sent between two
// snapshots of its metrics, by resource (or kind, as older servers label
// them).
func watchEvents(d snapshot) map[string]float64 {
	out := map[string]float64{}
	for _, x := range d {
		if x.Name != "apiserver_watch_events_total" || x.Value == 0 {
			continue
		}
		r := x.Labels["resource"]
		if r == "" {
			r = x.Labels["kind"]
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

// residentSet reads VmRSS, the resident set of pid now, in bytes.
func residentSet(pid int) (int64, error) {
	st, err := procStatus(pid)
	return int64(st.VmRSS), err
}

// procStatus reads /proc/<pid>/status with procfs.
func procStatus(pid int) (procfs.ProcStatus, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return p.NewStatus()
}
