//go:build !race

package testkit

// raceEnabled reports whether this binary was built with -race.
const raceEnabled = false
