package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	// probeLps is the learner's Forward of the probe under version probeVersion.
	probeLps     []float32
	probeVersion int32
	// A torch learner the run may restart (learner.restart): how it was started, the restarts
	// left, and the state saved before the step in progress (restartDir, at update
	// restartSteps).
	procOpts     remote.ProcessOptions
	restartsLeft int
	restartDir   string
	restartSteps int64
}

// attachLearner makes l train through the configured external learner (nothing for builtin).
// ref is the reference policy's checkpoint folder, or "" without one.
func (r *Run) attachLearner(l *learn.Learner, p config.Phase, ref string) error {
	c := r.Cfg.Learner
	if c.Tinker() {
		return r.attachTinker(l, p) // tinker.go
	}
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
		s.procOpts = remote.ProcessOptions{Python: c.Python, Path: c.Path, Args: args, Env: env,
			Log: filepath.Join(dir, "learner.log")}
		proc, err := remote.Start(ctx, s.procOpts)
		if err != nil {
			return err
		}
		s.proc, url, s.restartsLeft = proc, proc.URL, c.Restart
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
// the learner and by the run's model, and a difference beyond the tolerance of the learner's
// precision (learner.probe_tolerance) stops the run with both numbers. The sync's time and the
// probe's difference go into m. The learner's logprobs are kept for the check of the servers
// the version is then published to (publishProbe).
func (r *Run) syncLearner(version int32, m algo.Metrics) error {
	if r.tinker != nil {
		return r.syncTinker(version, m) // tinker.go
	}
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
	probe := r.probeSeqs()
	theirs, err := s.probe(ctx, probe, version)
	if err != nil {
		return err
	}
	ours := learn.Outputs{Logprobs: make([]float32, len(probe.Tokens))}
	if err := (&learn.Builtin{Model: r.model, RowLen: len(probe.Tokens)}).Forward(ctx, probe, learn.ForwardOptions{}, &ours); err != nil {
		return fmt.Errorf("weight sync probe: %w", err)
	}
	worst, mean, at := probeDiff(theirs[1:], ours.Logprobs[1:])
	m["sync/probe_max_abs_diff"] = worst
	m["sync/probe_mean_abs_diff"] = mean
	dtype := s.dtype()
	if tol := r.Cfg.Learner.Tolerance(dtype); !(worst <= tol) {
		return fmt.Errorf("weight sync probe after v%d: the learner at %s scores probe token %d at logprob %v, the run's model (what the engine samples with) at %v: |Δ| %.3g (mean %.3g) beyond the %s tolerance %g; the weights loaded are not the learner's",
			version, s.client.URL(), at+1, theirs[at+1], ours.Logprobs[at+1], worst, mean, dtype, tol)
	}
	return nil
}

// probe is the learner's Forward of the probe sequence under version's weights, asked once.
func (s *learnerSession) probe(ctx context.Context, probe *learn.Seqs, version int32) ([]float32, error) {
	if s.probeLps != nil && s.probeVersion == version {
		return s.probeLps, nil
	}
	out := learn.Outputs{Logprobs: make([]float32, len(probe.Tokens))}
	if err := s.client.Forward(ctx, probe, learn.ForwardOptions{}, &out); err != nil {
		return nil, fmt.Errorf("weight sync probe: %w", err)
	}
	s.probeLps, s.probeVersion = out.Logprobs, version
	return out.Logprobs, nil
}

// dtype is the precision the learner computes in.
func (s *learnerSession) dtype() string {
	if d := s.client.Learner().DType; d != "" {
		return d
	}
	return "float32"
}

// probeDiff is the largest and the mean |a[i] − b[i]|, and where the largest is.
func probeDiff(a, b []float32) (worst, mean float64, at int) {
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		mean += d
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if len(a) > 0 {
		mean /= float64(len(a))
	}
	return worst, mean, at
}

// probeSeqs is the run's probe: one fixed sequence of up to 64 token ids spread over the
// vocabulary the model and the tokenizer share, every token scored.
func (r *Run) probeSeqs() *learn.Seqs {
	vocab := r.model.Cfg.Vocab
	if r.tok != nil {
		vocab = min(vocab, r.tok.VocabSize())
	}
	return probeSeqs(vocab, min(r.model.Cfg.MaxSeq, 64))
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

// learnerFailed says whether err is the learner's failure (it died, stopped answering, or
// restarted by itself), which a restart may mend, rather than a request it refused.
func learnerFailed(err error) bool {
	return errors.Is(err, learn.ErrLearner) || errors.Is(err, remote.ErrRestarted)
}

// canRestart says whether the session restarts its learner when it fails.
func (s *learnerSession) canRestart() bool { return s != nil && s.proc != nil && s.restartsLeft > 0 }

// keepRestartState has the learner save its state before a step, for a restart to start from.
// A step that left the update count where it was keeps the folder it had.
func (s *learnerSession) keepRestartState(ctx context.Context) error {
	steps := s.client.OptimizerSteps()
	if s.restartDir != "" && s.restartSteps == steps {
		return nil
	}
	dir := filepath.Join(s.dir, fmt.Sprintf("restart-%d", steps))
	os.RemoveAll(dir)
	if err := s.client.SaveState(ctx, dir); err != nil {
		return fmt.Errorf("saving the learner's state for a restart: %w", err)
	}
	if s.restartDir != "" {
		os.RemoveAll(s.restartDir)
	}
	s.restartDir, s.restartSteps = dir, steps
	return nil
}

// restart replaces the learner, which failed with cause, by a new process on the same address
// loaded with the state saved before the step: the client adopts its epoch and checks that its
// update count is the one saved (remote.Client.Recover), so the step can be done again with
// nothing trained twice or lost.
func (s *learnerSession) restart(ctx context.Context, cause error) error {
	s.restartsLeft--
	addr := strings.TrimPrefix(s.proc.URL, "http://")
	s.proc.Kill() // a learner that stopped answering is still there
	s.proc.Stop()
	opts := s.procOpts
	opts.Listen = addr
	proc, err := remote.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("%w; restarting it: %w", cause, err)
	}
	s.proc = proc
	s.probeLps = nil
	if err := s.client.Recover(ctx, s.restartDir, s.restartSteps); err != nil {
		return fmt.Errorf("%w; the restarted learner: %w", cause, err)
	}
	return nil
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
