package reconcile

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestFieldsShape: contents have one shape when they differ only in
// numbers outside lists; a field added or removed anywhere, a list changed
// in any way, a value of another JSON type, or another string or boolean
// (which choose server defaults: a Deployment's strategy type, a pod's
// hostNetwork) gives another shape. (applyContent drops the digest label
// before: TestApplyContent.)
func TestFieldsShape(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "ns", "labels": map[string]any{"app": "web"}},
			"spec": map[string]any{
				"replicas": int64(1),
				"strategy": map[string]any{"type": "RollingUpdate"},
				"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
				"template": map[string]any{"spec": map[string]any{"hostNetwork": false, "containers": []any{
					map[string]any{"name": "web", "image": "web:1", "args": []any{"-a"}},
				}}},
			},
		}
	}
	spec := func(m map[string]any) map[string]any { return m["spec"].(map[string]any) }
	labels := func(m map[string]any) map[string]any {
		return m["metadata"].(map[string]any)["labels"].(map[string]any)
	}
	tests := []struct {
		name   string
		change func(map[string]any)
		same   bool
	}{
		{"unchanged", func(map[string]any) {}, true},
		{"another number", func(m map[string]any) { spec(m)["replicas"] = int64(2) }, true},
		{"another label value", func(m map[string]any) { labels(m)["app"] = "db" }, false},
		// RollingUpdate's defaulted rollingUpdate would stay owned by the
		// POST, and a Recreate apply is refused while it is there.
		{"another string: a strategy type", func(m map[string]any) {
			spec(m)["strategy"] = map[string]any{"type": "Recreate"}
		}, false},
		{"another boolean", func(m map[string]any) {
			spec(m)["template"].(map[string]any)["spec"].(map[string]any)["hostNetwork"] = true
		}, false},
		{"a label added", func(m map[string]any) { labels(m)["tier"] = "cache" }, false},
		{"a field removed", func(m map[string]any) { delete(spec(m), "replicas") }, false},
		{"a value of another type", func(m map[string]any) { spec(m)["replicas"] = "1" }, false},
		{"an empty map for a number", func(m map[string]any) { spec(m)["replicas"] = map[string]any{} }, false},
		{"a list item's value", func(m map[string]any) {
			spec(m)["template"] = map[string]any{"spec": map[string]any{"hostNetwork": false, "containers": []any{
				map[string]any{"name": "web", "image": "web:2", "args": []any{"-a"}},
			}}}
		}, false},
	}
	want, err := fieldsShape(base())
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 12 {
		t.Errorf("fieldsShape = %q, want 12 hex digits", want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.change(m)
			got, err := fieldsShape(m)
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tt.same {
				t.Errorf("fieldsShape = %q, base %q: same = %v, want %v", got, want, got == want, tt.same)
			}
		})
	}
}

// TestDigestLabel: the label value carries the digest, and the shape of a
// POSTed child's fields or the mark of their move when there is one; each
// form is a valid label value.
func TestDigestLabel(t *testing.T) {
	const digest = "0123456789abcdef01234567" // 12 bytes, as appliedDigest
	for _, shape := range []string{"", "feed01234567", movedMark} {
		v := digestLabel(digest, shape)
		if d, s := parseDigestLabel(v); d != digest || s != shape {
			t.Errorf("parseDigestLabel(%q) = %q, %q; want %q, %q", v, d, s, digest, shape)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("digestLabel(%q, %q) = %q: not a label value: %v", digest, shape, v, errs)
		}
	}
}
