package etcdnodes

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// writeProbe writes one key every 200 ms and remembers when writes
// succeeded, so that a test can bound how long the cluster took no write.
type writeProbe struct {
	mu    sync.Mutex
	oks   []time.Time
	stop  context.CancelFunc
	done  chan struct{}
	start time.Time
}

func startWriteProbe(ctx context.Context, cli *clientv3.Client) *writeProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &writeProbe{stop: cancel, done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cli.Put(wctx, "availability-probe", time.Now().Format(time.RFC3339Nano))
			wcancel()
			if err == nil {
				p.mu.Lock()
				p.oks = append(p.oks, time.Now())
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return p
}

// longestGap is the longest time within [from, to] in which no write
// succeeded, and when it began.
func (p *writeProbe) longestGap(from, to time.Time) (gap time.Duration, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := from
	for _, ok := range p.oks {
		if ok.Before(from) {
			continue
		}
		if ok.After(to) {
			break
		}
		if d := ok.Sub(last); d > gap {
			gap, at = d, last
		}
		last = ok
	}
	if d := to.Sub(last); d > gap {
		gap, at = d, last
	}
	return gap, at
}

func (p *writeProbe) close() {
	p.stop()
	<-p.done
}
