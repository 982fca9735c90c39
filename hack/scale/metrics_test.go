package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// exposition is a scrape of an API server and an operator, trimmed.
const exposition = `# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",resource="memcacheds",subresource="",verb="POST"} 10
apiserver_request_total{code="200",component="apiserver",resource="memcacheds",subresource="status",verb="APPLY"} 12
apiserver_request_total{code="200",component="apiserver",resource="pods",subresource="",verb="WATCH"} 3
# HELP apiserver_request_duration_seconds Response latency.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{resource="memcacheds",subresource="status",verb="APPLY",le="+Inf"} 12
apiserver_request_duration_seconds_sum{resource="memcacheds",subresource="status",verb="APPLY"} 0.6
apiserver_request_duration_seconds_count{resource="memcacheds",subresource="status",verb="APPLY"} 12
apiserver_request_duration_seconds_sum{resource="pods",subresource="",verb="WATCH"} 900
# HELP apiserver_watch_events_total Number of events sent in watch clients
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="apps",resource="deployments",version="v1"} 40
# HELP apiserver_admission_webhook_admission_duration_seconds Admission webhook latency.
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="label-slot.opkit.dev",operation="CREATE",rejected="false",type="admit",le="+Inf"} 10
apiserver_admission_webhook_admission_duration_seconds_sum{name="label-slot.opkit.dev",operation="CREATE",rejected="false",type="admit"} 0.25
apiserver_admission_webhook_admission_duration_seconds_count{name="label-slot.opkit.dev",operation="CREATE",rejected="false",type="admit"} 10
# HELP controller_runtime_webhook_latency_seconds Histogram of the latency of processing admission requests
# TYPE controller_runtime_webhook_latency_seconds histogram
controller_runtime_webhook_latency_seconds_bucket{webhook="/label-slot-memcached",le="+Inf"} 10
controller_runtime_webhook_latency_seconds_sum{webhook="/label-slot-memcached"} 0.01
controller_runtime_webhook_latency_seconds_count{webhook="/label-slot-memcached"} 10
# HELP rest_client_requests_total Number of HTTP requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PATCH"} 7
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 1
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 4
`

// TestScrapeAttributes parses a scrape with expfmt and attributes it: the
// operator's requests, the API server's by kind (watches left out), its
// watch fan-out and its calls to webhooks.
func TestScrapeAttributes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(exposition))
	}))
	defer srv.Close()
	before, err := scrape(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(before); got != 19 {
		t.Errorf("series scraped = %d, want 19", got)
	}
	zero := snapshot{}
	d := delta(zero, before)

	if diff := cmp.Diff(map[string]apiKind{
		"POST memcacheds":         {Count: 10},
		"APPLY memcacheds/status": {Count: 12, Seconds: 0.6},
	}, apiKinds(d)); diff != "" {
		t.Errorf("apiKinds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"deployments": 40}, watchEvents(d)); diff != "" {
		t.Errorf("watchEvents (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]apiKind{"label-slot.opkit.dev CREATE": {Count: 10, Seconds: 0.25}}, admissionWebhooks(d)); diff != "" {
		t.Errorf("admissionWebhooks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]apiKind{"/label-slot-memcached": {Count: 10, Seconds: 0.01}}, webhookHandlers(d)); diff != "" {
		t.Errorf("webhookHandlers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"memcacheds": 10, "memcacheds/status": 12}, clusterWrites(d)); diff != "" {
		t.Errorf("clusterWrites (-want +got):\n%s", diff)
	}
	r := summarise(d)
	want := requests{ByMethod: map[string]float64{"PATCH": 8, "GET": 4}, ByCode: map[string]float64{"200": 11, "409": 1},
		Total: 12, Writes: 8, Conflicts: 1, Outcomes: map[string]float64{}, StatusWrites: map[string]float64{}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("summarise (-want +got):\n%s", diff)
	}
	if got := kindWrites(apiKinds(d), "memcacheds", "memcacheds/status"); got != 22 {
		t.Errorf("kindWrites = %v, want 22", got)
	}
}
