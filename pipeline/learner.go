package pipeline

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/internal/envref"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/learn/remote"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

// An RL phase with `learner: {backend: http | torch}` trains through the learner contract in
// another process (learn/remote). At the phase's start the run writes the policy (and, resuming,
// the optimizer state) as a state folder under <run>/learner/ and has the learner load it (a
// torch learner is started on it, its log at <run>/learner/learner.log); after every update the
// learner writes the new weights for the sampler and the run loads them into its own model,
// which the engine, evaluation and checkpoints read as before; before each checkpoint, and at
// the phase's end, the learner's whole state (value head and optimizer moments included) comes
// back into the run's model and optimizer, so checkpoints resume exactly as with the built-in
// learner.

// learnerSession is the external learner of the RL phase in progress.
type learnerSession struct {
	client *remote.Client
	proc   *remote.Process // nil for backend http
	dir    string          // <run>/learner
	last   string          // the sampler folder loaded last
}

// attachLearner makes l train through the configured external learner (nothing for builtin).
// ref is the reference policy's checkpoint folder, or "" without one.
func (r *Run) attachLearner(l *learn.Learner, p config.Phase, ref string) error {
	c := r.Cfg.Learner
	if !c.External() {
		return nil
	}
	ctx := context.Background()
	dir := filepath.Join(r.Dir, "learner")
	start := filepath.Join(dir, "start-"+p.Name)
	os.RemoveAll(start)
	st := l.Opt.State()
	if err := checkpoint.Save(start, r.model, r.tok, &checkpoint.State{Optimizer: &st}); err != nil {
		return fmt.Errorf("learner: %w", err)
	}
	key := ""
	if c.Key != "" {
		var err error
		if key, err = envref.Resolve(c.Key); err != nil {
			return fmt.Errorf("learner.key: %w", err)
		}
	}
	s := &learnerSession{dir: dir}
	url := c.URL
	if c.Backend == learn.BackendTorch {
		oc := p.Optim.Config
		args := []string{"--model", start, "--state", start,
			"--beta1", strconv.FormatFloat(float64(oc.Beta1), 'g', -1, 32), "--beta2", strconv.FormatFloat(float64(oc.Beta2), 'g', -1, 32),
			"--eps", strconv.FormatFloat(float64(oc.Eps), 'g', -1, 32), "--weight-decay", strconv.FormatFloat(float64(oc.WeightDecay), 'g', -1, 32)}
		if ref != "" {
			args = append(args, "--reference", ref)
		}
		if c.Device != "" {
			args = append(args, "--device", c.Device)
		}
		if c.BF16 {
			args = append(args, "--bf16")
		}
		if c.ActivationCheckpointing {
			args = append(args, "--activation-checkpointing")
		}
		if c.MaxTokens > 0 {
			args = append(args, "--max-tokens", strconv.Itoa(c.MaxTokens))
		}
		if r.model.HasLoRA() {
			args = append(args, "--adapter", start) // learner_lora.go
		}
		var env []string
		if key != "" {
			args = append(args, "--key-env", "AGENTRL_LEARNER_KEY")
			env = append(env, "AGENTRL_LEARNER_KEY="+key)
		}
		proc, err := remote.Start(ctx, remote.ProcessOptions{Python: c.Python, Path: c.Path, Args: args, Env: env,
			Log: filepath.Join(dir, "learner.log")})
		if err != nil {
			return err
		}
		s.proc, url = proc, proc.URL
	}
	client, err := remote.Dial(ctx, remote.Options{URL: url, Key: key, Timeout: c.Timeout, SamplerDir: filepath.Join(dir, "sampler")})
	if err != nil {
		s.stop()
		return err
	}
	s.client = client
	if err := checkAdapterLearner(r.model, client); err != nil {
		s.stop()
		return err
	}
	if c.Backend == learn.BackendHTTP {
		if ref != "" && !client.Learner().Reference {
			s.stop()
			return fmt.Errorf("learner %s has no reference policy (start it with --reference %s)", url, ref)
		}
		if err := client.LoadState(ctx, start); err != nil {
			return err
		}
	}
	if client.OptimizerSteps() != st.Step {
		s.stop()
		return fmt.Errorf("learner %s is at optimizer update %d, the run at %d", url, client.OptimizerSteps(), st.Step)
	}
	l.Backend = client
	r.learner = s
	return nil
}

// syncLearner loads the weights the learner has after the update into the run's model (the one
// the engine samples with), as version, then checks the sync: a fixed probe sequence is scored by
// the learner and by the run's model, and a difference beyond the learner's precision's tolerance
// stops the run with both numbers. The sync's time and the probe's difference go into m.
func (r *Run) syncLearner(version int32, m algo.Metrics) error {
	s := r.learner
	if s == nil {
		return nil
	}
	t0 := time.Now()
	ctx := context.Background()
	art, err := s.client.SaveForSampler(ctx, version)
	if err != nil {
		return err
	}
	if err := loadTensors(r.model, nil, art.Dir, false); err != nil {
		return fmt.Errorf("learner's weights v%d: %w", version, err)
	}
	if s.last != "" {
		os.RemoveAll(s.last)
	}
	s.last = art.Dir
	m["time/learner_sync_s"] = time.Since(t0).Seconds()
	probe := probeSeqs(r.model.Cfg.Vocab, min(r.model.Cfg.MaxSeq, 64))
	n := len(probe.Tokens)
	theirs := learn.Outputs{Logprobs: make([]float32, n)}
	ours := learn.Outputs{Logprobs: make([]float32, n)}
	if err := s.client.Forward(ctx, probe, learn.ForwardOptions{}, &theirs); err != nil {
		return fmt.Errorf("weight sync probe: %w", err)
	}
	if err := (&learn.Builtin{Model: r.model, RowLen: len(probe.Tokens)}).Forward(ctx, probe, learn.ForwardOptions{}, &ours); err != nil {
		return fmt.Errorf("weight sync probe: %w", err)
	}
	worst, at := 0.0, 0
	for i := range ours.Logprobs {
		if d := math.Abs(float64(ours.Logprobs[i]) - float64(theirs.Logprobs[i])); d > worst {
			worst, at = d, i
		}
	}
	m["sync/probe_max_abs_diff"] = worst
	dtype := s.client.Learner().DType
	if dtype == "" {
		dtype = "float32"
	}
	if tol := probeTolerance(dtype); worst > tol {
		return fmt.Errorf("weight sync probe after v%d: the learner at %s scores probe token %d at logprob %v, the run's model (what the engine samples with) at %v: |Δ| %.3g beyond the %s tolerance %g; the weights loaded are not the learner's",
			version, s.client.URL(), at, theirs.Logprobs[at], ours.Logprobs[at], worst, dtype, tol)
	}
	return nil
}

// probeSeqs is the fixed probe: one sequence of n token ids spread over the vocabulary, every
// token scored.
func probeSeqs(vocab, n int) *learn.Seqs {
	s := &learn.Seqs{Tokens: make([]int32, n), Offsets: []int{0, n}, Mask: make([]bool, n)}
	x := uint32(2463534242)
	for i := range s.Tokens {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		s.Tokens[i] = int32(x % uint32(vocab))
		s.Mask[i] = true
	}
	return s
}

// probeTolerance is the largest |Δ logprob| on the probe that a sync may show between a learner
// computing in dtype and the run's float32 model.
func probeTolerance(dtype string) float64 {
	if dtype == "bfloat16" {
		return 0.25
	}
	return 1e-3
}

// fetchLearner brings the learner's whole state (weights, value head, optimizer) into the run's
// model and opt.
func (r *Run) fetchLearner(opt *optim.AdamW) error {
	s := r.learner
	if s == nil {
		return nil
	}
	dir := filepath.Join(s.dir, "state")
	if err := s.client.SaveState(context.Background(), dir); err != nil {
		return err
	}
	if err := loadTensors(r.model, opt, dir, true); err != nil {
		return fmt.Errorf("learner's state: %w", err)
	}
	return nil
}

// closeLearner fetches the learner's state into the run's model and stops a learner the run
// started. The first error is returned; the process is stopped regardless.
func (r *Run) closeLearner(opt *optim.AdamW) error {
	s := r.learner
	if s == nil {
		return nil
	}
	err := r.fetchLearner(opt)
	s.stop()
	r.learner = nil
	return err
}

func (s *learnerSession) stop() {
	if s.proc != nil {
		s.proc.Stop()
	}
}

// loadTensors copies the tensors of a learner's folder into m by name: model.safetensors
// always, and with state the value head (when m has one) and, into opt, the optimizer's
// moments and update count.
func loadTensors(m *model.Model, opt *optim.AdamW, dir string, state bool) error {
	if m.HasLoRA() {
		return loadAdapterTensors(m, opt, dir, state)
	}
	read := func(name string) (map[string]checkpoint.Tensor, map[string]string, error) {
		return checkpoint.ReadSafetensors(filepath.Join(dir, name))
	}
	w, _, err := read("model.safetensors")
	if err != nil {
		return err
	}
	if state && m.HasValueHead() {
		vh, _, err := read("value_head.safetensors")
		if err != nil {
			return err
		}
		for k, v := range vh {
			w[k] = v
		}
	}
	tensors := m.Params.Tensors()
	for _, t := range tensors {
		if t.ValueHead() && !state {
			continue
		}
		src, ok := w[t.Name]
		if !ok || len(src.Data) != len(t.Data) {
			return fmt.Errorf("tensor %s is missing or of another size", t.Name)
		}
	}
	var ost optim.State
	if state && opt != nil {
		o, meta, err := read("optimizer.safetensors")
		if err != nil {
			return err
		}
		step, err := strconv.ParseInt(meta["step"], 10, 64)
		if err != nil || step < 0 {
			return fmt.Errorf("optimizer.safetensors: step %q", meta["step"])
		}
		ost = optim.State{Step: step, M: make([]float32, m.NumParams()), V: make([]float32, m.NumParams())}
		for _, t := range tensors {
			a, okA := o["exp_avg."+t.Name]
			b, okB := o["exp_avg_sq."+t.Name]
			if !okA || !okB || len(a.Data) != len(t.Data) || len(b.Data) != len(t.Data) {
				return fmt.Errorf("optimizer.safetensors: the moments of %s are missing or of another size", t.Name)
			}
			copy(ost.M[t.Offset:], a.Data)
			copy(ost.V[t.Offset:], b.Data)
		}
	}
	for _, t := range tensors {
		if t.ValueHead() && !state {
			continue
		}
		copy(t.Data, w[t.Name].Data)
	}
	if state && opt != nil {
		if err := opt.LoadState(ost); err != nil {
			return err
		}
	}
	return nil
}
