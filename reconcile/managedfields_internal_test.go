package reconcile

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzStatusKeys: what statusKeys keeps of JSON is JSON, and ownedStatus reads
// from it what it reads from the whole entry.
func FuzzStatusKeys(f *testing.F) {
	for _, seed := range []string{
		`{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":{".":{},"f:type":{}}},"f:nodes":{}}}`,
		` { "f:status" : { "f:a" : { "f:b" : { } } , "f:conditions" : { "k:{\"type\":\"A\\\"B\"}" : { } } } } `,
		`{"f:spec":{"f:replicas":{}},"f:status":{"f:x":{}}}`,
		`{"f:status":{"f:conditions":[]}}`,
		`{"f:status":{}}`,
		`{}`,
		`{"f:status":{"f:a":{},}}`,
		`{"f:status":{"f:a":{}}`,
		`{"f:status":"x"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out, ok := statusKeys([]byte(raw))
		if !ok || !json.Valid([]byte(raw)) { // the API server sends JSON
			return
		}
		if strings.Count(strings.ToLower(raw), `"f:status"`) != strings.Count(raw, `"f:status"`) {
			return // ownedStatus's encoding/json matches keys case-insensitively
		}
		if !json.Valid(out) {
			t.Fatalf("statusKeys(%s) = %s: not JSON", raw, out)
		}
		entry := func(fields []byte) []metav1.ManagedFieldsEntry {
			return []metav1.ManagedFieldsEntry{{Manager: "m", Subresource: "status", FieldsV1: metav1.NewFieldsV1(string(fields))}}
		}
		wantFields, wantConds := ownedStatus(entry([]byte(raw)), "m")
		gotFields, gotConds := ownedStatus(entry(out), "m")
		if diff := cmp.Diff(wantFields, gotFields); diff != "" {
			t.Errorf("fields of %s (-whole +kept):\n%s", raw, diff)
		}
		if diff := cmp.Diff(wantConds, gotConds); diff != "" {
			t.Errorf("conditions of %s (-whole +kept):\n%s", raw, diff)
		}
	})
}
