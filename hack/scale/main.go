// Command scale measures the memcached operator (examples/memcached) at scale
// against the control plane's own limit, in one run on a throwaway local
// cluster (internal/localcluster: real etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, kwok fake nodes, QPS limits
// off):
//
//  1. create N Memcacheds of size 1 and wait until all are Ready=True at their
//     current generation (the operator marks Ready only when the pods are
//     available);
//  2. create N plain Deployments directly and wait until all are rolled out
//     and available: what the control plane alone takes;
//  3. leave everything untouched for a while, with the operator's informers
//     resyncing often, and count the requests the operator sends;
//  4. resize 100 Memcacheds from 1 to 2 pods, then 100 Deployments directly;
//  5. delete every Memcached, then every Deployment, and wait until they and
//     everything they own (Deployments, ReplicaSets, Pods, Services, PDBs) are
//     gone.
//
// The operator runs as a separate process, built from ./examples/memcached;
// its API requests come from its metrics endpoint (client-go's
// rest_client_requests_total) and its peak RSS from /proc/<pid>/status
// (VmHWM). The cluster and the operator are removed at the end, also on
// failure and on Ctrl-C. Everything listens on loopback.
//
//	cd hack && go run ./scale -n 1000 -out ../.local/scale
//
// writes scale.md (tables), scale.json (raw numbers) and scale.png (ready
// count over time, operator vs direct) into -out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

type config struct {
	N            int
	Nodes        int
	Resize       int
	Workers      int
	Steady       time.Duration
	SyncPeriod   time.Duration
	Timeout      time.Duration
	Out          string
	OperatorArgs []string
}

func main() {
	var cfg config
	var opArgs stringList
	flag.IntVar(&cfg.N, "n", 1000, "number of Memcacheds, and of Deployments created directly")
	flag.IntVar(&cfg.Nodes, "nodes", 10, "number of kwok fake nodes")
	flag.IntVar(&cfg.Resize, "resize", 100, "number of Memcacheds (and Deployments) resized from 1 to 2 pods")
	flag.IntVar(&cfg.Workers, "workers", 16, "concurrent create, patch and delete requests of the benchmark client")
	flag.DurationVar(&cfg.Steady, "steady", 60*time.Second, "how long the steady-state phase leaves everything untouched")
	flag.DurationVar(&cfg.SyncPeriod, "sync-period", 15*time.Second, "the operator's informer resync period (--sync-period), to force resyncs in the steady phase")
	flag.DurationVar(&cfg.Timeout, "phase-timeout", 15*time.Minute, "how long one phase may take before the run fails")
	flag.StringVar(&cfg.Out, "out", ".local/scale", "directory for scale.md, scale.json and scale.png")
	flag.Var(&opArgs, "operator-arg", "extra flag for the operator (repeatable), e.g. --operator-arg=--max-concurrent-reconciles=8")
	flag.Parse()
	cfg.OperatorArgs = opArgs
	if cfg.N < 1 || cfg.Resize < 0 || cfg.Resize > cfg.N || cfg.Nodes < 1 || cfg.Workers < 1 {
		fmt.Fprintln(os.Stderr, "scale: need -n >= 1, 0 <= -resize <= -n, -nodes >= 1, -workers >= 1")
		os.Exit(2)
	}

	// The benchmark's own cache logs nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nscale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) (err error) {
	out, err := filepath.Abs(cfg.Out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	env, err := setUp(ctx, cfg)
	// setUp returns what it started even on failure, so that it is torn down.
	defer func() {
		if terr := env.tearDown(); terr != nil {
			err = errors.Join(err, terr)
		}
	}()
	if err != nil {
		return err
	}
	res, err := measure(ctx, env, cfg)
	if err != nil {
		return err
	}
	if err := writeResults(out, cfg, env, res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nresults in %s\n", out)
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint([]string(*s)) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
