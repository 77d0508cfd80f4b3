package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/hub"
	"github.com/agentrl/agentrl/internal/envref"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/learn/tinker"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// A run with `learner: {backend: tinker}` trains a LoRA adapter on a Tinker service (hosted
// Tinker, or SkyRL's server of the same API), whose weights never come to this process: the
// run's own model is the service's base model as init describes it — its configuration,
// tokenizer and chat template, no weights (tinkerBase).
//
//   - At the start the run opens a session and creates the adapter on the service (or, resuming,
//     loads the training state its checkpoint names, optimizer included), checks with get_info
//     that the service trains the base model and rank asked and, where the service names its
//     tokenizer, that it is init's, then saves the weights for sampling as the run's policy
//     version.
//   - Rollouts and held-out evaluations sample through Tinker's sampler (tinker.Sampler) from
//     the tinker:// path of the version last saved; every RL update is forward → the loss in
//     Go → forward_backward → optim_step, then save_weights_for_sampler under the new version,
//     checked to be the path asked for, before any episode samples it.
//   - A checkpoint saves the training state on the service (save_weights under the
//     checkpoint's name) and writes a folder that names it and holds no weights
//     (checkpoint.SaveRemote); agentrl train --resume loads it back into a new model of a new
//     session.

// tinkerSession is the run's connection to its Tinker service.
type tinkerSession struct {
	client  *tinker.Client
	sampler *tinker.Sampler
	// sampled is the artifact the sampler samples from (the run's policy version).
	sampled  learn.Artifact
	counted  int64  // the sampler's calls at the last update
	stopBeat func() // stops the session's heartbeat
}

// openTinker connects the run to its Tinker service at its policy version: a fresh adapter at
// the start, or, when resuming, the training state the checkpoint saved there (from).
func (r *Run) openTinker(ctx context.Context, from *checkpoint.RemoteWeights) error {
	c := r.Cfg.Learner
	key := ""
	if c.Key != "" {
		var err error
		if key, err = envref.Resolve(c.Key); err != nil {
			return fmt.Errorf("learner.key: %w", err)
		}
	}
	seed := int64(r.Cfg.Seed & (1<<31 - 1)) // the adapter's initialization is the run's
	client, err := tinker.Dial(ctx, tinker.Options{URL: c.URL, Key: key, BaseModel: c.BaseModel, Rank: c.Rank, Timeout: c.Timeout, Seed: &seed})
	if err != nil {
		return fmt.Errorf("learner (Tinker service %s): %w", c.URL, err)
	}
	info, err := client.Info(ctx)
	if err != nil {
		return fmt.Errorf("learner (Tinker service %s): %w", c.URL, err)
	}
	if err := r.checkTinkerTokenizer(info); err != nil {
		return err
	}
	if from != nil {
		if from.BaseModel != c.BaseModel || from.Rank != c.Rank {
			return fmt.Errorf("resume: the checkpoint's weights are a rank-%d adapter on %s; learner.base_model is %s and learner.rank %d", from.Rank, from.BaseModel, c.BaseModel, c.Rank)
		}
		if from.Weights == "" {
			return errors.New("resume: the checkpoint names no training state on the Tinker service")
		}
		if err := client.LoadWeights(ctx, from.Weights, from.OptimizerSteps); err != nil {
			return fmt.Errorf("resume: loading %s on the Tinker service: %w", from.Weights, err)
		}
		r.printf("learner: Tinker service %s, model %s loaded with %s (%d updates)\n", c.URL, client.ModelID(), from.Weights, from.OptimizerSteps)
	} else {
		r.printf("learner: Tinker service %s trains a rank-%d LoRA adapter on %s as model %s; the run's weights live there\n", c.URL, c.Rank, c.BaseModel, client.ModelID())
	}
	s := &tinkerSession{client: client, sampler: tinker.NewSampler(client, r.tok.VocabSize())}
	if err := s.publish(ctx, r.version); err != nil {
		return err
	}
	s.stopBeat = s.heartbeat(tinkerHeartbeat)
	r.tinker = s
	return nil
}

// tinkerHeartbeat is how often the session tells the service it is alive (Tinker's SDK: 10s).
const tinkerHeartbeat = 10 * time.Second

// heartbeat sends session_heartbeat every period until the returned function is called. A
// heartbeat that fails is not the run's failure: the next call of the run's own says what is
// wrong, with its deadline.
func (s *tinkerSession) heartbeat(period time.Duration) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					select {
					case <-done:
						cancel()
					case <-ctx.Done():
					}
				}()
				s.client.Heartbeat(ctx)
				cancel()
			}
		}
	}()
	return func() { close(done); <-ended }
}

// close stops the heartbeat.
func (s *tinkerSession) close() {
	if s != nil && s.stopBeat != nil {
		s.stopBeat()
	}
}

// checkTinkerTokenizer refuses a service whose sampler tokenizes otherwise than the run: where
// get_info names the tokenizer (hosted Tinker does) and init is a Hub reference, they must be the
// same repository.
func (r *Run) checkTinkerTokenizer(info tinker.ModelInfo) error {
	if info.TokenizerID == "" {
		return nil
	}
	if !hub.IsRef(r.Cfg.Init) {
		r.printf("note: the Tinker service samples with tokenizer %s; init is a folder (%s), whose tokenizer must be the same\n", info.TokenizerID, r.Cfg.Init)
		return nil
	}
	ref, err := hub.ParseRef(r.Cfg.Init)
	if err != nil {
		return err
	}
	if !strings.EqualFold(ref.Repo, info.TokenizerID) {
		return fmt.Errorf("learner: the Tinker service samples %s with tokenizer %s; the run tokenizes with init's (%s): the token ids would not mean the same", info.BaseModel, info.TokenizerID, ref.Repo)
	}
	return nil
}

// publish saves the adapter for sampling as version and makes it what the sampler samples.
func (s *tinkerSession) publish(ctx context.Context, version int32) error {
	art, err := s.client.SaveForSampler(ctx, version)
	if err != nil {
		return err
	}
	if err := s.sampler.Use(art); err != nil {
		return err
	}
	s.sampled = art
	return nil
}

// syncTinker saves the weights of the update just made for sampling as version, before any
// episode samples it; the save's time and the sampler's counts go into m.
func (r *Run) syncTinker(version int32, m algo.Metrics) error {
	t0 := time.Now()
	if err := r.tinker.publish(context.Background(), version); err != nil {
		return err
	}
	m["time/learner_sync_s"] = time.Since(t0).Seconds()
	calls := r.tinker.sampler.Calls()
	m["tinker/samples"] = float64(calls - r.tinker.counted) // since the last update
	r.tinker.counted = calls
	return nil
}

// tinkerFailed is the error that stops the run when the Tinker sampler failed a sample (the
// service did not answer, failed it, or answered outside the protocol): an episode records
// the failure as its status, and the run does not go on training on what is left.
func (r *Run) tinkerFailed() error {
	if r.tinker == nil {
		return nil
	}
	n, first := r.tinker.sampler.Failed()
	if n == 0 {
		return nil
	}
	return fmt.Errorf("the Tinker sampler failed %d of %d samples, first: %w; the run stops here: resume it from its last checkpoint (agentrl train --resume %s)", n, r.tinker.sampler.Calls(), first, r.Dir)
}

// attachTinker makes l train through the run's Tinker client with phase p's AdamW settings.
func (r *Run) attachTinker(l *learn.Learner, p config.Phase) error {
	s := r.tinker
	if s == nil {
		return errors.New("learner: the Tinker service was not opened")
	}
	if err := tinker.Check(tinker.Needs{GradClip: p.Optim.GradClip}); err != nil {
		return err
	}
	oc := p.Optim.Config
	s.client.SetAdam(float64(oc.Beta1), float64(oc.Beta2), float64(oc.Eps), float64(oc.WeightDecay))
	l.Backend = s.client
	return nil
}

// tinkerName is a checkpoint's name as a Tinker checkpoint id (letters, digits, '-', '_').
func tinkerName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
}

// remoteWeights describes the service's weights at the run's policy version; with training, the
// training state saved there under name.
func (r *Run) remoteWeights(ctx context.Context, name string, training bool) (checkpoint.RemoteWeights, error) {
	s, c := r.tinker, r.Cfg.Learner
	w := checkpoint.RemoteWeights{Service: "tinker", URL: c.URL, BaseModel: c.BaseModel, Rank: c.Rank, ModelID: s.client.ModelID(),
		Sampler: s.sampled.URI, Version: s.sampled.Version, OptimizerSteps: s.client.OptimizerSteps()}
	if training {
		path, err := s.client.SaveWeights(ctx, tinkerName(name))
		if err != nil {
			return w, err
		}
		w.Weights = path
	}
	return w, nil
}

// saveTinkerCheckpoint saves the training state on the service and writes checkpoint dir naming
// it, with st (the run's progress) and no weights.
func (r *Run) saveTinkerCheckpoint(dir, name string, st *checkpoint.State, training bool) error {
	w, err := r.remoteWeights(context.Background(), name, training)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if st != nil {
		st.Optimizer = nil // the optimizer is on the service
	}
	return checkpoint.SaveRemote(dir, r.model.Cfg, r.tok, st, w)
}

// tinkerBase is the run's model from init's folder dir without its weights: the configuration
// (config.json) and the tokenizer, which is all a run whose weights live on the service reads of
// it. Nothing is loaded that could be mistaken for the trained weights, and a base model larger
// than this host's memory is no obstacle.
func (r *Run) tinkerBase(dir string) (*checkpoint.Checkpoint, error) {
	mc, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if want := r.Cfg.ModelConfig(mc.Vocab); mc != want {
		return nil, fmt.Errorf("init: checkpoint %s has model %+v; the config describes %+v (did config.json change since the run started?)", r.Cfg.Init, mc, want)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if tok.VocabSize() > mc.Vocab {
		return nil, fmt.Errorf("init: %s: the tokenizer has %d ids but config.json's vocab_size is %d", dir, tok.VocabSize(), mc.Vocab)
	}
	return &checkpoint.Checkpoint{Model: &model.Model{Cfg: mc}, Tokenizer: tok}, nil
}

// newTinkerLearner is the phase's learner on the Tinker service: the schedule and the step in
// Go, the weights and the optimizer (resumed with them) on the service.
func (r *Run) newTinkerLearner(p config.Phase, start int) (*learn.Learner, error) {
	if err := p.Optim.Validate(); err != nil {
		return nil, err
	}
	sched, err := p.Optim.Schedule(p.Steps)
	if err != nil {
		return nil, err
	}
	rowLen := r.Cfg.Rollout.MaxContext
	if rowLen < 2 || rowLen > r.model.Cfg.MaxSeq {
		return nil, fmt.Errorf("learn: row length %d must be in [2, model max_seq %d]", rowLen, r.model.Cfg.MaxSeq)
	}
	return &learn.Learner{Model: r.model, Sched: sched, GradClip: float32(p.Optim.GradClip), RowLen: rowLen, Step: start}, nil
}
