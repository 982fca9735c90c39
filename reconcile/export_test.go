package reconcile

import "k8s.io/utils/clock"

// SetClock replaces the clock WithProgressDelay measures by, so that tests
// step time instead of sleeping.
func SetClock[T Object](r *Reconciler[T], c clock.PassiveClock) { r.clock = c }
