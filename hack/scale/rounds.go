package main

import (
	"slices"
	"strings"
)

// A single run's ratio moves by about +-0.2 from run to run: every
// process's CPU time for the same work varies by 15-20% (docs/benchmarks/
// scale.md, Noise). -rounds measures the contenders' steps again on the
// same cluster, reversing their order every other round so that a drift of
// the machine over the run weighs on each contender alike, and judges the
// targets on the median of the rounds' ratios.

// round is the step times of every contender in one round.
type round struct {
	Order []string `json:"order"`
	// Seconds is contender -> step -> seconds; the steps are stepCreate,
	// stepResize, stepDelete and stepObjectsGone.
	Seconds map[string]map[string]float64 `json:"seconds"`
}

const (
	stepCreate      = "create"
	stepResize      = "resize"
	stepDelete      = "delete"
	stepObjectsGone = "objectsGone"
)

// roundOrder is the contenders' order in round i (0-based): contenderOrder,
// reversed in every odd round.
func roundOrder(i int) []string {
	order := slices.Clone(contenderOrder)
	if i%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// addRound records the step times of m, measured in order, as r's next
// round.
func (r *runResult) addRound(order []string, m *runResult) {
	rd := round{Order: order, Seconds: map[string]map[string]float64{}}
	for name, c := range m.Contenders {
		rd.Seconds[name] = map[string]float64{
			stepCreate:      c.Create.Seconds,
			stepResize:      c.Resize.Seconds,
			stepDelete:      c.Delete.Seconds,
			stepObjectsGone: c.Delete.Extra["objectsGoneSeconds"],
		}
	}
	r.Rounds = append(r.Rounds, rd)
}

// roundRatio is a ratio of step times judged over the rounds.
type roundRatio struct {
	what, a, b, step string
	target           float64 // 0: none
}

// createVsDirect is the ratio the create target and the curve are judged
// on.
var createVsDirect = roundRatio{"create, opkit / direct", contOpkit, contDirect, stepCreate, targetCreateVsDirect}

var roundRatios = []roundRatio{
	createVsDirect,
	{"create, opkit / tutorial", contOpkit, contTutorial, stepCreate, targetCreateVsTutorial},
	{"resize, opkit / direct", contOpkit, contDirect, stepResize, targetResizeVsDirect},
	{"delete, opkit / direct", contOpkit, contDirect, stepDelete, targetDeleteVsDirect},
	{"create, opkit / floor", contOpkit, contFloor, stepCreate, 0},
	{"create, floor / direct", contFloor, contDirect, stepCreate, 0},
	{"resize, opkit / floor", contOpkit, contFloor, stepResize, 0},
	{"delete, opkit / floor", contOpkit, contFloor, stepDelete, 0},
	{"create, watched / floor", contWatched, contFloor, stepCreate, 0},
	{"create, opkit / watched", contOpkit, contWatched, stepCreate, 0},
}

// of returns the ratio in every round, in round order.
func (q roundRatio) of(rounds []round) []float64 {
	out := make([]float64, 0, len(rounds))
	for _, rd := range rounds {
		if a, b := rd.Seconds[q.a][q.step], rd.Seconds[q.b][q.step]; a > 0 && b > 0 {
			out = append(out, a/b)
		}
	}
	return out
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// roundsTable renders every round's ratios and their medians, with the
// verdict on the median.
func roundsTable(w func(string, ...any), r *runResult) {
	if len(r.Rounds) < 2 {
		return
	}
	w("Rounds at N=%d, on the same cluster, the order reversed every other round (`-rounds %d`). The verdict is on the median ratio; round 1 is the run in the tables above.\n\n", r.N, len(r.Rounds))
	w("| ratio |")
	for i, rd := range r.Rounds {
		w(" round %d (%s) |", i+1, strings.Join(rd.Order, ", "))
	}
	w(" median | spread | target |\n|---|%s---:|---:|---|\n", strings.Repeat("---:|", len(r.Rounds)))
	for _, q := range roundRatios {
		xs := q.of(r.Rounds)
		if len(xs) == 0 {
			continue
		}
		w("| %s |", q.what)
		for _, x := range xs {
			w(" %.2f |", x)
		}
		med := median(xs)
		w(" **%.2f** | %.2f-%.2f |", med, slices.Min(xs), slices.Max(xs))
		if q.target > 0 {
			w(" <= %.2f (%s) |\n", q.target, verdict(med <= q.target))
		} else {
			w(" |\n")
		}
	}
	w("\n| seconds |")
	for i := range r.Rounds {
		w(" round %d |", i+1)
	}
	w("\n|---|%s\n", strings.Repeat("---:|", len(r.Rounds)))
	for _, name := range columns(r) {
		for _, step := range []string{stepCreate, stepResize, stepDelete} {
			w("| %s: %s |", name, step)
			for _, rd := range r.Rounds {
				w(" %.1f |", rd.Seconds[name][step])
			}
			w("\n")
		}
	}
	w("\n")
}
