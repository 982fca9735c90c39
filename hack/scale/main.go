// Command scale measures the memcached operator (examples/memcached) at scale
// against the control plane's own limit and against a peer, in one run on
// throwaway local clusters (internal/localcluster: real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, kwok fake
// nodes, QPS limits off). Three contenders, each in its namespace, one after
// the other on the same cluster:
//
//   - direct: the benchmark itself creates, resizes and deletes exactly the
//     children the operator would (a Deployment and a headless Service per
//     object, a PodDisruptionBudget once it has two pods);
//   - opkit: examples/memcached, run as a process;
//   - tutorial: hack/scale/tutorial, the same operator written the way the
//     operator-sdk/kubebuilder tutorial teaches, run as a process.
//
// For each: create N of size 1 until all are Ready (Memcacheds Ready=True at
// their generation with their pods available; Deployments rolled out and
// available), leave them for a while with the informers resyncing often
// (operators), resize some from 1 to 2 pods, delete all until they and
// everything they own are gone.
//
// The operators' API requests come from their metrics endpoints (client-go's
// rest_client_requests_total, parsed with prometheus/common/expfmt), the
// API server's work by request kind from its own metrics, CPU time and
// resident sets from /proc (prometheus/procfs). Each N of -curve runs on a
// fresh cluster with fresh operators. Clusters and operators are removed at
// the end, also on failure and on Ctrl-C. Everything listens on loopback.
//
//	cd hack && go run ./scale -n 1000 -curve 250,500,2000 -out ../.local/scale
//
// writes scale.md (tables), scale.json (raw numbers) and scale.png (ready
// count over time at -n, per contender) into -out.
//
//	cd hack && go run ./scale -n 10000 -replicas 1,3 -out ../.local/shards
//
// runs the shards experiment instead (shards.go): the opkit operator alone
// as one replica, then as three shards, and writes shards.md and
// shards.json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// config is the run's settings, recorded in scale.json.
type config struct {
	N            int           `json:"n"`
	Curve        []int         `json:"curve,omitempty"`
	Rounds       int           `json:"rounds,omitempty"`
	Floor        bool          `json:"floor,omitempty"`
	Watched      bool          `json:"watched,omitempty"`
	Nodes        int           `json:"nodes"`
	Resize       int           `json:"resize"`
	Workers      int           `json:"workers"`
	Steady       time.Duration `json:"steady"`
	SyncPeriod   time.Duration `json:"syncPeriod"`
	Timeout      time.Duration `json:"phaseTimeout"`
	Out          string        `json:"-"`
	OperatorArgs []string      `json:"operatorArgs,omitempty"`
	TutorialArgs []string      `json:"tutorialArgs,omitempty"`
	Profile      string        `json:"-"`
	// Replicas (-replicas) runs the shards experiment instead of the
	// contenders: the opkit operator as each count of replicas.
	Replicas []int `json:"replicas,omitempty"`
	// Namespaces (-namespaces) spreads the shards experiment's
	// Memcacheds over that many namespaces.
	Namespaces int `json:"namespaces,omitempty"`
	// SlotWebhook (-slot-webhook) has the shards label new Memcacheds
	// at admission, through r0's webhook.
	SlotWebhook bool `json:"slotWebhook,omitempty"`
	// replicas is the count of the run being set up.
	replicas int
}

func main() {
	var cfg config
	var opArgs, tutArgs stringList
	var curve, replicas string
	flag.IntVar(&cfg.N, "n", 1000, "number of objects of each contender in the main run (its tables and plot)")
	flag.StringVar(&curve, "curve", "", "comma-separated further N, each measured on a fresh cluster, for the scaling curve (e.g. 250,500,2000)")
	flag.BoolVar(&cfg.Watched, "watched", false, "also measure the watched floor: the floor, beside a process that only watches its Memcacheds and their Deployments (hack/scale/tutorial --watch-only); watched / floor is what watching alone costs any operator")
	flag.BoolVar(&cfg.Floor, "floor", false, "also measure the floor: the benchmark creates each Memcached with its owned children and writes its status once, with no operator (what the custom resource itself costs; opkit / floor is the operator's own overhead)")
	flag.IntVar(&cfg.Rounds, "rounds", 1, "times the contenders' steps are measured at -n, on one cluster, in reversed order every other round; the targets are judged on the median ratio")
	flag.IntVar(&cfg.Nodes, "nodes", 10, "number of kwok fake nodes")
	flag.IntVar(&cfg.Resize, "resize", 100, "number of Memcacheds (and Deployments) resized from 1 to 2 pods")
	flag.IntVar(&cfg.Workers, "workers", 16, "concurrent create, patch and delete requests of the benchmark client")
	flag.DurationVar(&cfg.Steady, "steady", 60*time.Second, "how long the steady-state phase leaves everything untouched")
	flag.DurationVar(&cfg.SyncPeriod, "sync-period", 15*time.Second, "the operator's informer resync period (--sync-period), to force resyncs in the steady phase")
	flag.DurationVar(&cfg.Timeout, "phase-timeout", 15*time.Minute, "how long one phase may take before the run fails")
	flag.StringVar(&cfg.Out, "out", ".local/scale", "directory for scale.md, scale.json and scale.png")
	flag.Var(&opArgs, "operator-arg", "extra flag for the opkit operator (repeatable), e.g. --operator-arg=--ready-events=always")
	flag.Var(&tutArgs, "tutorial-arg", "extra flag for the tutorial operator (repeatable)")
	flag.StringVar(&cfg.Profile, "profile", "", "directory for CPU profiles of the API server and the operators, one per phase (<phase>-<process>.pprof); empty takes none")
	flag.StringVar(&replicas, "replicas", "", "comma-separated counts of opkit replicas (e.g. 1,3), each on a fresh cluster with -n Memcacheds: the shards experiment (shards.md) instead of the contenders; one replica is restarted, one of several is killed")
	flag.IntVar(&cfg.Namespaces, "namespaces", 1, "with -replicas, spread the Memcacheds over this many namespaces, round robin: the controller-manager's deployment and replica set controllers list their whole namespace on every sync, so 10 000 in one namespace take it about an hour here")
	flag.BoolVar(&cfg.SlotWebhook, "slot-webhook", true, "with -replicas above 1, r0 serves the ring's mutating webhook, which labels each new Memcached with its slot at admission (the chart's sharding with webhook.enable); false: each Memcached is created unlabelled and its Sharder patches the label")
	rerenderDir := flag.String("rerender", "", "write scale.md and scale.png again from the scale.json in this directory, measuring nothing; with -profile, first split the CPU profiles found there into the results (and write scale.json again)")
	flag.Parse()
	if *rerenderDir != "" {
		if err := rerender(*rerenderDir, cfg.Profile); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		return
	}
	cfg.OperatorArgs, cfg.TutorialArgs = opArgs, tutArgs
	if cfg.Floor {
		contenderOrder = append(contenderOrder, contFloor)
	}
	if cfg.Watched {
		contenderOrder = append(contenderOrder, contWatched)
	}
	for f := range strings.SplitSeq(curve, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "scale: -curve %q: want comma-separated numbers >= 1\n", curve)
			os.Exit(2)
		}
		cfg.Curve = append(cfg.Curve, n)
	}
	for f := range strings.SplitSeq(replicas, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "scale: -replicas %q: want comma-separated counts >= 1\n", replicas)
			os.Exit(2)
		}
		cfg.Replicas = append(cfg.Replicas, k)
	}
	if cfg.Namespaces < 1 || cfg.Namespaces > 1 && len(cfg.Replicas) == 0 {
		fmt.Fprintln(os.Stderr, "scale: -namespaces: want a count >= 1, and more than 1 only with -replicas (the contenders share one namespace each)")
		os.Exit(2)
	}
	if cfg.N < 1 || cfg.Resize < 0 || cfg.Nodes < 1 || cfg.Workers < 1 || cfg.Rounds < 1 {
		fmt.Fprintln(os.Stderr, "scale: need -n >= 1, -rounds >= 1, -resize >= 0 (at most N are resized), -nodes >= 1, -workers >= 1")
		os.Exit(2)
	}

	// The benchmark's own cache logs nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(cfg.Replicas) > 0 {
		contenderOrder = []string{contOpkit}
		err = runShards(ctx, cfg)
	} else {
		err = run(ctx, cfg)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nscale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	out, err := outDir(cfg.Out)
	if err != nil {
		return err
	}
	res := &results{Started: time.Now().UTC(), Nodes: cfg.Nodes, Primary: cfg.N}
	ns := slices.Sorted(slices.Values(append([]int{cfg.N}, cfg.Curve...)))
	ns = slices.Compact(ns)
	var m machine
	for _, n := range ns {
		fmt.Fprintf(os.Stderr, "\n== N=%d\n", n)
		r, mm, err := runOnce(ctx, cfg, n)
		if err != nil {
			return err
		}
		res.Runs = append(res.Runs, r)
		if n == cfg.N {
			m = mm
		}
	}
	if err := writeResults(out, cfg, m, res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nresults in %s\n", out)
	return nil
}

// outDir makes dir and returns its absolute path.
func outDir(dir string) (string, error) {
	out, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return out, os.MkdirAll(out, 0o755)
}

// runOnce measures every contender at n on a cluster of its own.
func runOnce(ctx context.Context, cfg config, n int) (res *runResult, m machine, err error) {
	e, err := setUp(ctx, cfg)
	// setUp returns what it started even on failure, so that it is torn down.
	defer func() {
		if terr := e.tearDown(); terr != nil {
			err = errors.Join(err, terr)
		}
	}()
	if err != nil {
		return nil, m, err
	}
	if res, err = measure(ctx, e, cfg, n, contenderOrder, false); err != nil {
		return nil, m, err
	}
	if n == cfg.N && cfg.Rounds > 1 {
		res.addRound(contenderOrder, res)
		for i := 1; i < cfg.Rounds; i++ {
			order := roundOrder(i)
			fmt.Fprintf(os.Stderr, "\n== N=%d, round %d of %d: %s\n", n, i+1, cfg.Rounds, strings.Join(order, ", "))
			again, err := measure(ctx, e, cfg, n, order, true)
			if err != nil {
				return nil, m, fmt.Errorf("round %d: %w", i+1, err)
			}
			res.addRound(order, again)
		}
	}
	return res, describe(e), nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint([]string(*s)) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
