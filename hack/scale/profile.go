package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/rest"
)

// profileChunk is the length of one CPU profile request. A phase's profile
// is the merge of back-to-back chunks, so it covers the phase and at most
// one chunk beyond its end.
const profileChunkSeconds = 5

// profiling is the CPU profiling of one phase: the API server's and the
// operators' (operatorProfileURLs), each written to -profile as
// <phase>-<process>.pprof when stopped.
type profiling struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// startProfiling profiles the API server (through its /debug/pprof, with
// the benchmark's admin credentials) and the operators (through their
// --pprof-bind-address) until stop. It returns nil when -profile is unset.
func (b *bench) startProfiling(ctx context.Context, phase string) (*profiling, error) {
	if b.cfg.Profile == "" {
		return nil, nil
	}
	if err := os.MkdirAll(b.cfg.Profile, 0o755); err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(b.e.cfg)
	if err != nil {
		return nil, fmt.Errorf("API server profile: %w", err)
	}
	targets := map[string]struct {
		client *http.Client
		url    string
	}{"kube-apiserver": {hc, strings.TrimSuffix(b.e.cfg.Host, "/") + "/debug/pprof/profile"}}
	for proc, url := range b.operatorProfileURLs() {
		targets[proc] = struct {
			client *http.Client
			url    string
		}{http.DefaultClient, url}
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &profiling{cancel: cancel}
	for proc, t := range targets {
		path := profilePath(b.cfg.Profile, phase, proc)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := profileUntilDone(ctx, t.client, t.url, path); err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Errorf("profiling %s: %w", proc, err))
				p.mu.Unlock()
			}
		}()
	}
	return p, nil
}

// operatorProfileURLs maps each operator process to profile to its CPU
// profile URL: every live replica of a sharded run, else the contender's
// operator.
func (b *bench) operatorProfileURLs() map[string]string {
	ops := []*operator{b.cur.op}
	if len(b.e.replicas) > 1 {
		ops = b.e.replicas
	}
	urls := map[string]string{}
	for _, op := range ops {
		if op != nil && !op.killed && op.pprofURL != "" {
			urls[operatorProcess(op.name)] = op.pprofURL + "/debug/pprof/profile"
		}
	}
	return urls
}

// stop ends the profiling after the chunk under way and writes the
// profiles.
func (p *profiling) stop() error {
	if p == nil {
		return nil
	}
	p.cancel()
	p.wg.Wait()
	return errors.Join(p.errs...)
}

// profilePath is the file the profile of process proc in phase is written
// to, in dir.
func profilePath(dir, phase, proc string) string {
	return filepath.Join(dir, fileSafe(phase)+"-"+proc+".pprof")
}

// operatorProcess is the process name of contender's operator in profile
// file names.
func operatorProcess(contender string) string { return contender + "-operator" }

// splitProfiles reads the profiles of phase in dir and splits the API
// server's and the operator's (process operator, "" for none) CPU time by
// activity (splitCPU); nil for a profile that was not written.
func splitProfiles(dir, phase, operator string) (apiServer, op map[string]float64, err error) {
	read := func(proc string, activities []cpuActivity) (map[string]float64, error) {
		path := profilePath(dir, phase, proc)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return splitCPUFile(path, activities)
	}
	if apiServer, err = read("kube-apiserver", apiServerActivities); err != nil {
		return nil, nil, err
	}
	if operator != "" {
		if op, err = read(operator, operatorActivities); err != nil {
			return nil, nil, err
		}
	}
	return apiServer, op, nil
}

// profileUntilDone takes CPU profiles of profileChunkSeconds from url one
// after the other until ctx is done, then writes their merge to path.
func profileUntilDone(ctx context.Context, hc *http.Client, url, path string) error {
	var chunks []*profile.Profile
	for ctx.Err() == nil {
		// The request itself must not be cancelled mid-chunk: the
		// profile is only written at its end.
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, fmt.Sprintf("%s?seconds=%d", url, profileChunkSeconds), nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		prof, err := profile.ParseData(body)
		if err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		chunks = append(chunks, prof)
	}
	if len(chunks) == 0 {
		return nil
	}
	merged, err := profile.Merge(chunks)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := merged.Write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// fileSafe turns a phase name into a file name: letters and digits, the
// rest as single dashes.
func fileSafe(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// saveHeap writes the heap profile at pprofURL, taken after a GC, to
// path.
func saveHeap(ctx context.Context, pprofURL, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pprofURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
