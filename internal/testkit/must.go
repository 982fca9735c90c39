package testkit

import "testing"

// Must fails t with err (t.Fatal(err)) when err is not nil, and reports the
// caller's line: it calls t.Helper.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
