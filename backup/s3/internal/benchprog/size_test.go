package main

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "64 KiB": 64 << 10, "4096": 4096} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1GiB", "many"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) succeeded, want an error", bad)
		}
	}
	if got := formatSize(1 << 30); got != "1.0 GiB" {
		t.Errorf("formatSize(1 GiB) = %q", got)
	}
}

func TestVMHWM(t *testing.T) {
	if kib, err := vmHWM(); err != nil || kib <= 0 {
		t.Errorf("vmHWM() = %d KiB, %v; want this process's peak RSS", kib, err)
	}
}
