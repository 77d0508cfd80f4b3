package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
)

// publishedDir holds, under the run directory, the weights last published to inference servers
// (one folder, published/vN, a checkpoint the servers load: agentrl servers are sent its
// model.safetensors, SGLang servers load the folder from disk).
const publishedDir = "published"

// policySampler is where an RL phase generates: the local engine, or the inference servers of
// rollout.generator through a router. publish makes the run's current weights (r.model as
// r.version) the policy that generates next.
type policySampler struct {
	gen    infer.Generator
	eng    *local.Engine  // in-process
	router *remote.Router // on servers
	r      *Run
	// pending carries the outcome of an asynchronous publish to the servers, when one is in flight.
	pending chan error
}

// newSampler starts phase p's generator. Servers are brought to the run's current policy
// first, under a new epoch (publishEpoch): an agentrl server takes the run's version even when
// it serves a higher one, which a killed process of this run published after its last
// checkpoint.
func (r *Run) newSampler(ctx context.Context, p config.Phase) (*policySampler, error) {
	g := r.Cfg.Rollout.Generator
	if g == nil {
		swap := p.RL != nil && p.RL.Async != nil && !p.RL.Async.Partial()
		eng, err := local.NewEngine(r.model, r.version, local.EngineConfig{Slots: r.Cfg.Rollout.EngineSlots, MaxLen: r.Cfg.Rollout.MaxContext,
			SwapAtCompletion: swap, Precision: r.Cfg.SamplingPrecision()})
		if err != nil {
			return nil, err
		}
		return &policySampler{gen: eng, eng: eng, r: r}, nil
	}
	opts, err := g.Options()
	if err != nil {
		return nil, err
	}
	opts.Epoch = publishEpoch()
	router, err := remote.New(opts)
	if err != nil {
		return nil, err
	}
	if err := r.probeServers(ctx, router); err != nil {
		router.Close()
		return nil, err
	}
	s := &policySampler{gen: router, router: router, r: r}
	if err := s.toServers(ctx); err != nil {
		router.Close()
		return nil, err
	}
	return s, nil
}

// probeServers checks, before any weights are sent, that every server of the phase serves what
// the run needs (remote.Router.Probe): a server that answers wrongly stops the run with an error
// naming it; one that does not answer is ejected with a warning and re-admitted by the health
// checks when it comes up.
func (r *Run) probeServers(ctx context.Context, router *remote.Router) error {
	prompt, err := r.encodePrompt("", "1+1")
	if err != nil {
		return err
	}
	req := infer.Request{
		Prompt:   prompt,
		Sampling: r.Cfg.Rollout.Sampling,
		Seed:     r.Cfg.Seed,
	}
	infos, err := router.Probe(ctx, remote.ProbeOptions{Request: req, MaxContext: r.Cfg.Rollout.MaxContext})
	if err != nil {
		return err
	}
	for _, info := range infos {
		if info.Unreachable != nil {
			r.printf("warning: inference server ejected at start: %v\n", info.Unreachable)
		}
	}
	return nil
}

// publish makes r.model, as r.version, the policy that generates next. With wait it returns once
// every server (or the engine) uses it; without, once the weights are copied (the local engine)
// or written to disk (servers), and the update continues while the caller goes on.
func (s *policySampler) publish(ctx context.Context, wait bool) error {
	if s.eng != nil {
		applied, err := s.eng.LoadWeights(s.r.model, s.r.version)
		if err != nil {
			return err
		}
		if wait {
			<-applied
		}
		return nil
	}
	if err := s.settle(); err != nil {
		return err
	}
	if wait {
		return s.toServers(ctx)
	}
	v, dir, err := s.save()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	s.pending = done
	go func() { done <- s.send(ctx, v, dir) }()
	return nil
}

// settle waits for an asynchronous publish in flight and returns its error.
func (s *policySampler) settle() error {
	if s.pending == nil {
		return nil
	}
	err := <-s.pending
	s.pending = nil
	return err
}

// toServers writes the weights and publishes them, waiting.
func (s *policySampler) toServers(ctx context.Context) error {
	v, dir, err := s.save()
	if err != nil {
		return err
	}
	return s.send(ctx, v, dir)
}

// save writes the current weights once as published/vN, for the servers to load (a model with
// adapters: the adapter alone).
func (s *policySampler) save() (int32, string, error) {
	r := s.r
	v := r.version
	dir, err := filepath.Abs(filepath.Join(r.Dir, publishedDir, fmt.Sprintf("v%d", v)))
	if err != nil {
		return 0, "", err
	}
	if err := savePublished(dir, r.model, r.tok); err != nil { // learner_lora.go
		return 0, "", fmt.Errorf("publishing version %d: %w", v, err)
	}
	return v, dir, nil
}

// send publishes the folder dir as version v. A server the update did not reach gets no more
// requests until a later one reaches it; the run goes on while at least one server serves v.
// Older published folders are removed once v is published.
func (s *policySampler) send(ctx context.Context, v int32, dir string) error {
	if err := s.router.PublishWeights(ctx, v, filepath.Join(dir, "model.safetensors"), dir); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.router.Current(v) == 0 {
			return fmt.Errorf("no inference server serves policy version %d: %w", v, err)
		}
		s.r.printf("warning: %v (generation continues on the other servers)\n", err)
	}
	return pruneDirs(filepath.Dir(dir), filepath.Base(dir))
}

// lastEpoch is the epoch publishEpoch gave last.
var lastEpoch atomic.Int64

// publishEpoch is the epoch of a new RL phase's weight updates (remote.Options.Epoch): the time,
// in milliseconds since 1970, and above any this process gave before. A resumed run starts later
// than its killed process did, so its epoch is newer and the servers take its version, lower
// than the ones the killed process published; a trainer on a host whose clock is behind that of
// an earlier trainer of the same servers is refused by them (409, stale epoch), never mixed in.
func publishEpoch() int64 {
	for {
		last := lastEpoch.Load()
		e := max(time.Now().UnixMilli(), last+1)
		if lastEpoch.CompareAndSwap(last, e) {
			return e
		}
	}
}

// pruneDirs removes every entry of parent but keep.
func pruneDirs(parent, keep string) error {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() != keep && strings.HasPrefix(e.Name(), "v") {
			errs = append(errs, os.RemoveAll(filepath.Join(parent, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// close waits for a publish in flight and stops the generator; it returns the publish's error.
func (s *policySampler) close() error {
	if s.eng != nil {
		return s.eng.Close()
	}
	err := s.settle()
	s.router.Close()
	return err
}
