package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/learn"
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
	pending chan published
}

// published is the outcome of a publish to the servers: its error, and its figures (the sync's
// time, the probe's differences).
type published struct {
	m   algo.Metrics
	err error
}

// newSampler starts phase p's generator. Servers are brought to the run's current policy
// first, under a new epoch (publishEpoch): an agentrl server takes the run's version even when
// it serves a higher one, which a killed process of this run published after its last
// checkpoint.
func (r *Run) newSampler(ctx context.Context, p config.Phase) (*policySampler, error) {
	if r.tinker != nil { // the Tinker service's sampler (tinker.go)
		return &policySampler{gen: r.tinker.sampler, r: r}, nil
	}
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
	if out := s.toServers(ctx); out.err != nil {
		router.Close()
		return nil, out.err
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
//
// Every server checks the version it loads before it serves it (remote.SyncProbe): a server
// whose probe differs from the learner's beyond the tolerance stops the run. The sync's time and
// the probe's largest and mean differences over the servers go into m: with wait, this
// publish's; without, those of the publish before it, which this one waits for first.
func (s *policySampler) publish(ctx context.Context, wait bool, m algo.Metrics) error {
	if s.eng == nil && s.router == nil {
		return nil // Tinker's sampler samples the version saved when the update was (syncTinker)
	}
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
	prev, err := s.settle()
	if err != nil {
		return err
	}
	if wait {
		out := s.toServers(ctx)
		maps.Copy(m, out.m)
		return out.err
	}
	maps.Copy(m, prev)
	t0 := time.Now()
	probe, err := s.r.publishProbe(ctx)
	if err != nil {
		return err
	}
	v, dir, err := s.save()
	if err != nil {
		return err
	}
	done := make(chan published, 1)
	s.pending = done
	go func() { done <- s.send(ctx, v, dir, probe, t0) }()
	return nil
}

// settle waits for an asynchronous publish in flight and returns its figures and its error.
func (s *policySampler) settle() (algo.Metrics, error) {
	if s.pending == nil {
		return nil, nil
	}
	out := <-s.pending
	s.pending = nil
	return out.m, out.err
}

// toServers writes the weights and publishes them, checked, waiting.
func (s *policySampler) toServers(ctx context.Context) published {
	t0 := time.Now()
	probe, err := s.r.publishProbe(ctx)
	if err != nil {
		return published{err: err}
	}
	v, dir, err := s.save()
	if err != nil {
		return published{err: err}
	}
	return s.send(ctx, v, dir, probe, t0)
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

// send publishes the folder dir as version v, checked with probe on every server that loads it.
// A server the update did not reach gets no more requests until a later one reaches it; the run
// goes on while at least one server serves v. A server that loaded v and does not serve its
// weights stops the run. Older published folders are removed once v is published. t0 is when
// the sync began.
func (s *policySampler) send(ctx context.Context, v int32, dir string, probe *remote.SyncProbe, t0 time.Time) published {
	res, err := s.router.PublishChecked(ctx, v, filepath.Join(dir, "model.safetensors"), dir, probe)
	out := published{m: algo.Metrics{"time/server_sync_s": time.Since(t0).Seconds()}}
	if len(res) > 0 {
		var worst, mean float64
		for _, x := range res {
			worst, mean = max(worst, x.MaxDiff), max(mean, x.MeanDiff)
		}
		out.m["sync/server_probe_max_abs_diff"] = worst
		out.m["sync/server_probe_mean_abs_diff"] = mean
	}
	if err != nil {
		var pe *remote.SyncProbeError
		switch {
		case ctx.Err() != nil:
			out.err = ctx.Err()
			return out
		case errors.As(err, &pe):
			out.err = err
			return out
		case s.router.Current(v) == 0:
			out.err = fmt.Errorf("no inference server serves policy version %d: %w", v, err)
			return out
		}
		s.r.printf("warning: %v (generation continues on the other servers)\n", err)
	}
	out.err = pruneDirs(filepath.Dir(dir), filepath.Base(dir))
	return out
}

// publishProbe is the check of a publish of the run's current version to the inference servers:
// the probe sequence and the learner's logprobs of it under that version (an external
// learner's Forward, or, with the built-in learner, the run's model, which is its weights).
func (r *Run) publishProbe(ctx context.Context) (*remote.SyncProbe, error) {
	probe := r.probeSeqs()
	p := &remote.SyncProbe{Tokens: probe.Tokens, Tolerance: r.Cfg.Learner.Tolerance}
	var lps []float32
	if s := r.learner; s != nil {
		var err error
		if lps, err = s.probe(ctx, probe, r.version); err != nil {
			return nil, err
		}
		p.Learner, p.Precision = "the learner at "+s.client.URL(), s.dtype()
	} else {
		out := learn.Outputs{Logprobs: make([]float32, len(probe.Tokens))}
		if err := (&learn.Builtin{Model: r.model, RowLen: len(probe.Tokens)}).Forward(ctx, probe, learn.ForwardOptions{}, &out); err != nil {
			return nil, fmt.Errorf("weight sync probe: %w", err)
		}
		lps = out.Logprobs
		p.Learner, p.Precision = "the learner (the run's model)", remote.Float32
	}
	p.Want = lps[1:]
	return p, nil
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
	if s.router == nil {
		return nil
	}
	_, err := s.settle()
	s.router.Close()
	return err
}
