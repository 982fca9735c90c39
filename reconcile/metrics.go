package reconcile

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric names, registered on controller-runtime's registry (served on the
// manager's metrics endpoint) when the first Reconciler is built.
const (
	// MetricOutcomes counts passes by controller and outcome: done,
	// requeue_after, waiting, retry, terminal, invalid, paused, finalized, not_found.
	MetricOutcomes = "opkit_reconcile_outcomes_total"
	// MetricStatusWrites counts status writes by controller and result:
	// written (a request was sent), skipped (nothing changed), deferred
	// (WithProgressDelay), failed.
	MetricStatusWrites = "opkit_status_writes_total"
)

var (
	registerOnce sync.Once
	registerErr  error
	outcomesVec  *prometheus.CounterVec
	writesVec    *prometheus.CounterVec
)

type metrics struct {
	outcomes *prometheus.CounterVec
	writes   *prometheus.CounterVec
	name     string
}

func metricsFor(name string) (*metrics, error) {
	registerOnce.Do(func() {
		outcomesVec, registerErr = registerCounter(prometheus.CounterOpts{Name: MetricOutcomes,
			Help: "Reconcile passes by outcome: done, requeue_after, waiting, retry, terminal, invalid, paused, finalized, not_found."},
			"controller", "outcome")
		if registerErr != nil {
			return
		}
		writesVec, registerErr = registerCounter(prometheus.CounterOpts{Name: MetricStatusWrites,
			Help: "Status writes by result: written (a request was sent), skipped (nothing changed), deferred (WithProgressDelay), failed."},
			"controller", "result")
	})
	if registerErr != nil {
		return nil, registerErr
	}
	return &metrics{outcomes: outcomesVec, writes: writesVec, name: name}, nil
}

// registerCounter registers a counter vector, or reuses one already
// registered under the same name.
func registerCounter(opts prometheus.CounterOpts, labels ...string) (*prometheus.CounterVec, error) {
	vec := prometheus.NewCounterVec(opts, labels)
	if err := crmetrics.Registry.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("registering metric %s: %w", opts.Name, err)
	}
	return vec, nil
}

func (m *metrics) outcome(o string) { m.outcomes.WithLabelValues(m.name, o).Inc() }

func (m *metrics) statusWrite(result string) { m.writes.WithLabelValues(m.name, result).Inc() }
