package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// A child EnsureChild created with a POST carries, in its digest label,
// the shape of what the POST set: "<digest>-<shape>". Its fields then
// belong to the field owner's POST (an Update entry of managedFields), and
// an apply that stops setting one of them would not remove it. Before an
// update of a different shape (fieldsShape), EnsureChild therefore moves
// them to the field owner's apply (upgradeManagedFields: an uncached GET
// and a JSON patch). An update of the same shape sets every one of those
// fields again, so it is sent alone and the label keeps the POST's shape
// for the next update. A child upgraded by EnsureChild carries
// "<digest>-<movedMark>": its fields are all in the apply entry, and no
// later update reads it again. A child applied, or upgraded by an opkit
// version that did not mark it, carries the digest alone: before an update
// EnsureChild looks (with an uncached reader) for fields of a POST to move.
//
// The POST also owns what the API server defaulted, and some defaults
// depend on a value: a RollingUpdate Deployment gets rollingUpdate, which
// the server refuses next to Recreate; a pod on the host network gets
// host ports. An apply that changes such a value must take those fields
// over and drop them, which only the move allows. Such values are strings
// and booleans (types, modes, switches), so the shape keeps them, and
// counts only numbers by their type: a Deployment's replicas.

// movedMark takes the place of the shape in the digest label of a child
// whose POST's fields EnsureChild has moved to the field owner's apply. A
// shape is 12 hex digits, so the two never meet. An opkit version that
// does not know the mark reads it as a shape that differs, and moves
// nothing again (one uncached read).
const movedMark = "m"

// digestLabel returns the label value that records digest, and shape when
// the POST's fields have not been moved to the apply (or movedMark once
// they have).
func digestLabel(digest, shape string) string {
	if shape == "" {
		return digest
	}
	return digest + "-" + shape
}

// parseDigestLabel splits the digest label's value into the digest and the
// shape of a POSTed child not upgraded since, movedMark for one upgraded,
// "" for any other child.
func parseDigestLabel(v string) (digest, shape string) {
	digest, shape, _ = strings.Cut(v, "-")
	return digest, shape
}

// fieldsShape returns a digest of the fields content sets (apply content,
// as applyContent builds it: without the digest label) and of the values
// that may choose server defaults: two contents of equal shape set the
// same fields, and differ at most in numbers outside lists. Server-side
// apply tells list items apart by their values (the keys of a list map,
// the items of a set), so a list counts whole, values and all. 12 hex
// digits.
func fieldsShape(content map[string]any) (string, error) {
	b, err := json.Marshal(shapeOf(content))
	if err != nil {
		return "", fmt.Errorf("the shape of the child's fields: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6]), nil
}

// shapeOf replaces every number of v outside lists with a marker, keeping
// map keys, strings, booleans and lists. Each value is tagged with its
// kind, so that no two kinds encode alike.
func shapeOf(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = shapeOf(e)
		}
		return out
	case []any:
		return []any{"list", t}
	case string:
		return []any{"string", t}
	case bool:
		return []any{"bool", t}
	case nil:
		return []any{"null"}
	default:
		return []any{"number"}
	}
}
