package remote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
)

// python is Debian's python3 with torch, or the interpreter AGENTRL_TORCH_PYTHON names
// (scripts/gpu-check runs these tests with a GPU machine's current PyTorch).
var python = cmp.Or(os.Getenv("AGENTRL_TORCH_PYTHON"), "/usr/bin/python3")

// skipWithoutTorch skips the test when Debian's python3 with torch is absent (err is the
// learner's start error, which quotes its log).
func skipWithoutTorch(t testing.TB, err error) {
	t.Helper()
	if _, serr := os.Stat(python); serr != nil {
		t.Skipf("the PyTorch learner's tests need %s with torch (Debian's python3-torch): %v", python, serr)
	}
	if err != nil && strings.Contains(err.Error(), "No module named 'torch'") {
		t.Skipf("the PyTorch learner's tests need torch for %s (Debian's python3-torch): %v", python, err)
	}
}

// writeFolder writes m as a Hugging Face checkpoint folder the learner loads: config.json,
// model.safetensors, and value_head.safetensors with a value head.
func writeFolder(t testing.TB, dir string, m *model.Model) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := m.Cfg
	cfg := fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": %d,
 "intermediate_size": %d, "num_hidden_layers": %d, "num_attention_heads": %d, "num_key_value_heads": %d,
 "head_dim": %d, "hidden_act": "silu", "max_position_embeddings": %d, "rms_norm_eps": %g, "rope_theta": %g,
 "tie_word_embeddings": %t, "vocab_size": %d, "attention_bias": false, "mlp_bias": false, "rope_scaling": null,
 "torch_dtype": "float32"}`, c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim(), c.MaxSeq, c.NormEps, c.RopeTheta, c.TieEmbeddings, c.Vocab)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var weights, head []checkpoint.Tensor
	for _, nt := range m.Params.Tensors() {
		x := checkpoint.Tensor{Name: nt.Name, Shape: nt.Shape, Data: nt.Data}
		if nt.ValueHead() {
			head = append(head, x)
		} else {
			weights = append(weights, x)
		}
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), weights, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if len(head) > 0 {
		if err := checkpoint.WriteSafetensors(filepath.Join(dir, "value_head.safetensors"), head, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
}

// startTorch starts the reference learner on the folder (on listen, or a free port) and binds a
// client to it; it skips the test when there is no torch.
func startTorch(t testing.TB, dir, listen string, timeout time.Duration, extra ...string) (*Process, *Client) {
	t.Helper()
	root, err := filepath.Abs("../../learners/torch")
	if err != nil {
		t.Fatal(err)
	}
	oc := optimConfig.Config
	args := append([]string{"--model", dir, "--device", "cpu", "--threads", "1", "--max-tokens", "64",
		"--beta1", fmt.Sprint(oc.Beta1), "--beta2", fmt.Sprint(oc.Beta2), "--eps", fmt.Sprint(oc.Eps),
		"--weight-decay", fmt.Sprint(oc.WeightDecay)}, extra...)
	p, err := Start(context.Background(), ProcessOptions{Python: python, Path: root, Args: args, Listen: listen,
		Log: filepath.Join(t.TempDir(), "learner.log"), StartTimeout: time.Minute})
	skipWithoutTorch(t, err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	c, err := Dial(context.Background(), Options{URL: p.URL, Timeout: timeout, SamplerDir: filepath.Join(t.TempDir(), "sampler")})
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

func near(a, b, atol, rtol float64) bool { return math.Abs(a-b) <= atol+rtol*math.Abs(b) }

// compare checks got against want element by element.
func compare(t testing.TB, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, -1
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !near(float64(got[i]), float64(want[i]), atol, rtol) && d > worst {
			worst, at = d, i
		}
	}
	if at >= 0 {
		t.Fatalf("%s: index %d is %v, want %v (|Δ| %g; atol %g, rtol %g)", what, at, got[at], want[at], worst, atol, rtol)
	}
}

// From one checkpoint and one RL batch, the built-in learner and the PyTorch learner give the
// same logprobs, entropies and values, the same loss, and the same weights after the update, to
// float32 tolerance: PPO with a token-level correction (truncated importance weights), and GSPO.
func TestTorchParity(t *testing.T) {
	skipWithoutTorch(t, nil)
	m0 := tinyModel(t, 11)
	m0.AddValueHead()
	for i := range m0.Params.Value {
		m0.Params.Value[i] = 0.01 * float32(i%7-3)
	}
	dir := filepath.Join(t.TempDir(), "init")
	writeFolder(t, dir, m0)
	_, c := startTorch(t, dir, "", time.Minute)
	ppo := algo.DefaultLossConfig()
	ppo.Correction = algo.CorrectionConfig{Level: "token", Cap: 2}
	gspo := algo.LossConfig{Agg: algo.AggSeqMeanTokenMean}.WithPolicy("gspo")
	for _, tc := range []struct {
		name string
		loss algo.LossConfig
	}{{"ppo-correction", ppo}, {"gspo", gspo}} {
		t.Run(tc.name, func(t *testing.T) {
			m := m0.Clone()
			if err := c.LoadState(context.Background(), dir); err != nil { // the same start for each loss
				t.Fatal(err)
			}

			// Forward: logprobs, entropies and values of every masked token.
			b, err := algo.FromTrajectories(episodes())
			if err != nil {
				t.Fatal(err)
			}
			n := b.NumTokens()
			s := &learn.Seqs{Tokens: b.Tokens, Offsets: b.Offsets, Mask: b.Mask}
			o := learn.ForwardOptions{Entropies: true, Values: true}
			want := learn.Outputs{Logprobs: make([]float32, n), Entropies: make([]float32, n), Values: make([]float32, n)}
			got := learn.Outputs{Logprobs: make([]float32, n), Entropies: make([]float32, n), Values: make([]float32, n)}
			bi := &learn.Builtin{Model: m, RowLen: 32}
			if err := bi.Forward(context.Background(), s, o, &want); err != nil {
				t.Fatal(err)
			}
			if err := c.Forward(context.Background(), s, o, &got); err != nil {
				t.Fatal(err)
			}
			compare(t, "logprobs", got.Logprobs, want.Logprobs, 1e-5, 1e-5)
			compare(t, "entropies", got.Entropies, want.Entropies, 1e-5, 1e-5)
			compare(t, "values", got.Values, want.Values, 1e-6, 1e-5)

			// One RL step (two minibatches, two updates) on each.
			ll := newLearner(t, m)
			rl := newLearner(t, m.Clone())
			rl.Backend = c
			lu, ru := rlUpdate(t, ll, tc.loss), rlUpdate(t, rl, tc.loss)
			a, err := lu.Step(episodes(), 0, rand.New(rand.NewPCG(9, 9)))
			if err != nil {
				t.Fatal(err)
			}
			bb, err := ru.Step(episodes(), 0, rand.New(rand.NewPCG(9, 9)))
			if err != nil {
				t.Fatal(err)
			}
			if a.Updates != bb.Updates || a.Updates != 4 {
				t.Fatalf("updates: built-in %d, torch %d", a.Updates, bb.Updates)
			}
			for _, x := range []struct {
				name       string
				got, want  float64
				atol, rtol float64
			}{{"loss", bb.Loss, a.Loss, 1e-6, 1e-4}, {"grad norm", bb.GradNorm, a.GradNorm, 1e-6, 1e-4},
				{"entropy", bb.Entropy, a.Entropy, 1e-6, 1e-5}, {"shift kl", bb.Shift.KL, a.Shift.KL, 1e-6, 1e-4}} {
				if !near(x.got, x.want, x.atol, x.rtol) {
					t.Fatalf("%s: torch %v, built-in %v", x.name, x.got, x.want)
				}
			}
			art, err := c.SaveForSampler(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			trained, err := checkpoint.LoadModel(art.Dir)
			if err != nil {
				t.Fatal(err)
			}
			// AdamW's first updates move each weight by about lr·sign(g): the weights agree to
			// a small fraction of the learning rate.
			lr := optimConfig.LR
			compare(t, "weights after the step", trained.Params.Data, m.Params.Data[:len(trained.Params.Data)], lr*1e-3, 1e-5)
			moved := 0
			init, _ := checkpoint.LoadModel(dir)
			for i, v := range trained.Params.Data {
				if v != init.Params.Data[i] {
					moved++
				}
			}
			if moved < len(trained.Params.Data)/2 {
				t.Fatalf("only %d of %d weights moved", moved, len(trained.Params.Data))
			}
		})
	}
	t.Run("malformed-bodies", func(t *testing.T) { malformedBodies(t, c) })
}

// malformedBodies sends the learner corrupted forward and forward_backward bodies: each is
// answered 200 (a corruption that still decodes) or 400 with code bad_request, never a failure
// of the learner, and the learner keeps answering.
func malformedBodies(t *testing.T, c *Client) {
	ctx := context.Background()
	s := oneSeq()
	valid := [][]byte{
		encodeRequest(nil, s, kindForward, flagEntropies, nil),
		encodeRequest(nil, s, kindForwardBackward, flagDLogprobs, &learn.Coefficients{DLogprobs: []float32{0, 0, 1, 1}}),
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 120 {
		body := slices.Clone(valid[i%2])
		switch i % 4 {
		case 0:
			body = body[:rng.IntN(len(body))] // truncated
		case 1:
			body = append(body, byte(rng.IntN(256))) // trailing byte
		default:
			for range 1 + rng.IntN(3) {
				body[rng.IntN(len(body))] = byte(rng.IntN(256))
			}
		}
		path := "/v1/forward"
		if i%2 == 1 {
			path = "/v1/forward_backward"
		}
		_, err := c.call(ctx, "POST", path, "application/octet-stream", body, true)
		if err != nil && (errors.Is(err, learn.ErrLearner) || !strings.Contains(err.Error(), "learn/remote: learner")) {
			t.Fatalf("body %d (%x): %v", i, body, err)
		}
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
}

// The PyTorch learner under faults: one that stops answering fails the call at its deadline;
// one killed mid-step fails the step; one restarted from an older state is noticed by its new
// epoch and accepted only with the state at the run's update count, so no update is applied
// twice or lost.
func TestTorchLearnerFaults(t *testing.T) {
	skipWithoutTorch(t, nil)
	ctx := context.Background()
	m := tinyModel(t, 12)
	dir := filepath.Join(t.TempDir(), "init")
	writeFolder(t, dir, m)
	p, c := startTorch(t, dir, "", 20*time.Second)
	s := oneSeq()
	co := learn.Coefficients{DLogprobs: []float32{0, 0, -0.5, -0.5}}
	step := func() {
		t.Helper()
		if err := c.ForwardBackward(ctx, s, co); err != nil {
			t.Fatal(err)
		}
		if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2, GradClip: 1}); err != nil {
			t.Fatal(err)
		}
	}
	step()
	older := filepath.Join(t.TempDir(), "state-1")
	if err := c.SaveState(ctx, older); err != nil {
		t.Fatal(err)
	}
	step()
	current := filepath.Join(t.TempDir(), "state-2")
	if err := c.SaveState(ctx, current); err != nil {
		t.Fatal(err)
	}

	// Stops answering.
	quick, err := Dial(ctx, Options{URL: p.URL, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.Pause()
	out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens))}
	err = quick.Forward(ctx, s, learn.ForwardOptions{}, &out)
	p.Resume()
	// Paused before or while it writes its answer: either way the call ends at its deadline.
	if !errors.Is(err, learn.ErrLearner) || !strings.Contains(err.Error(), "did not answer") && !strings.Contains(err.Error(), "did not finish its answer") {
		t.Fatalf("paused learner: err = %v", err)
	}

	// Killed mid-step: its gradient is gone and the step fails.
	if err := c.ForwardBackward(ctx, s, co); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2}); !errors.Is(err, learn.ErrLearner) {
		t.Fatalf("killed learner: err = %v", err)
	}

	// Restarted on the same address from the older state.
	addr := strings.TrimPrefix(p.URL, "http://")
	p2, _ := startTorch(t, dir, addr, 20*time.Second, "--state", older)
	_ = p2
	if err := c.ForwardBackward(ctx, s, co); !errors.Is(err, ErrRestarted) {
		t.Fatalf("restarted learner: err = %v", err)
	}
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2}); !errors.Is(err, ErrRestarted) {
		t.Fatalf("restarted learner, optim_step: err = %v", err)
	}
	if err := c.Recover(ctx, older, 2); !errors.Is(err, ErrSteps) {
		t.Fatalf("recovering to an older state: err = %v", err)
	}
	if err := c.Recover(ctx, current, 2); err != nil {
		t.Fatal(err)
	}
	step()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Steps != 3 || c.OptimizerSteps() != 3 {
		t.Fatalf("after recovery the learner is at %d updates, the client at %d; want 3", info.Steps, c.OptimizerSteps())
	}
}

// A LoRA step: from one checkpoint with a PEFT adapter, the built-in learner and the PyTorch
// learner (with activation checkpointing) train the adapter alone to the same adapter weights
// (the base frozen on both sides), with the same logprobs and loss.
func TestTorchLoRAParity(t *testing.T) {
	skipWithoutTorch(t, nil)
	m := tinyModel(t, 13)
	base := filepath.Join(t.TempDir(), "base")
	writeFolder(t, base, m)
	if err := m.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "v_proj", "gate_proj", "down_proj"}}, 3); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range m.LoRA.Data { // B starts at zero; give it weight so that both factors train
		m.LoRA.Data[i] += 0.02 * float32(rng.NormFloat64())
	}
	adapter := filepath.Join(t.TempDir(), "adapter")
	if err := checkpoint.SaveAdapter(adapter, m, base); err != nil {
		t.Fatal(err)
	}
	// With activation checkpointing: the blocks' activations are recomputed in the backward
	// pass, which must change nothing.
	_, c := startTorch(t, base, "", time.Minute, "--adapter", adapter, "--activation-checkpointing")

	b, err := algo.FromTrajectories(episodes())
	if err != nil {
		t.Fatal(err)
	}
	n := b.NumTokens()
	s := &learn.Seqs{Tokens: b.Tokens, Offsets: b.Offsets, Mask: b.Mask}
	want := learn.Outputs{Logprobs: make([]float32, n)}
	got := learn.Outputs{Logprobs: make([]float32, n)}
	if err := (&learn.Builtin{Model: m, RowLen: 32}).Forward(context.Background(), s, learn.ForwardOptions{}, &want); err != nil {
		t.Fatal(err)
	}
	if err := c.Forward(context.Background(), s, learn.ForwardOptions{}, &got); err != nil {
		t.Fatal(err)
	}
	compare(t, "logprobs with the adapter", got.Logprobs, want.Logprobs, 1e-5, 1e-5)

	ll := newLearner(t, m)
	rl := newLearner(t, m.Clone())
	rl.Backend = c
	lu, ru := rlUpdate(t, ll, algo.DefaultLossConfig()), rlUpdate(t, rl, algo.DefaultLossConfig())
	a, err := lu.Step(episodes(), 0, rand.New(rand.NewPCG(9, 9)))
	if err != nil {
		t.Fatal(err)
	}
	bb, err := ru.Step(episodes(), 0, rand.New(rand.NewPCG(9, 9)))
	if err != nil {
		t.Fatal(err)
	}
	if a.Updates != 4 || bb.Updates != 4 || !near(bb.Loss, a.Loss, 1e-6, 1e-4) || !near(bb.GradNorm, a.GradNorm, 1e-6, 1e-4) {
		t.Fatalf("built-in %d updates, loss %v, grad norm %v; torch %d, %v, %v", a.Updates, a.Loss, a.GradNorm, bb.Updates, bb.Loss, bb.GradNorm)
	}
	art, err := c.SaveForSampler(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	trained, err := checkpoint.LoadModel(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.LoadAdapter(art.Dir, trained); err != nil {
		t.Fatal(err)
	}
	compare(t, "adapter after the step", trained.LoRA.Data, m.LoRA.Data, optimConfig.LR*1e-3, 1e-5)
	frozen, _ := checkpoint.LoadModel(base)
	if !slices.Equal(frozen.Params.Data, m.Params.Data) {
		t.Fatal("the built-in learner moved the frozen base")
	}
	if _, err := checkpoint.LoadAdapter(adapter, frozen); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, v := range trained.LoRA.Data {
		if v != frozen.LoRA.Data[i] {
			moved++
		}
	}
	if moved < len(trained.LoRA.Data)/2 {
		t.Fatalf("only %d of %d adapter weights moved", moved, len(trained.LoRA.Data))
	}
}

// What a run's learner.restart does, on the PyTorch learner: killed in the middle of a step
// (after its forward_backward), restarted on the same address, bound to its new epoch and loaded
// with the state saved before the step, the step done again ends where a learner that never
// failed ends: same update count, same logprobs (nothing trained twice, nothing lost). A learner
// that stops answering is killed and restarted the same way.
func TestTorchLearnerRestart(t *testing.T) {
	skipWithoutTorch(t, nil)
	ctx := context.Background()
	m := tinyModel(t, 14)
	dir := filepath.Join(t.TempDir(), "init")
	writeFolder(t, dir, m)
	s := oneSeq()
	co := learn.Coefficients{DLogprobs: []float32{0, 0, -0.5, -0.5}}
	step := func(c *Client) error {
		if err := c.ForwardBackward(ctx, s, co); err != nil {
			return err
		}
		_, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2, GradClip: 1})
		return err
	}
	logprobs := func(c *Client) []float32 {
		out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens))}
		if err := c.Forward(ctx, s, learn.ForwardOptions{}, &out); err != nil {
			t.Fatal(err)
		}
		return out.Logprobs
	}
	_, ref := startTorch(t, dir, "", 20*time.Second)
	for range 3 {
		if err := step(ref); err != nil {
			t.Fatal(err)
		}
	}
	want := logprobs(ref)

	p, c := startTorch(t, dir, "", 2*time.Second)
	addr := strings.TrimPrefix(p.URL, "http://")
	if err := step(c); err != nil {
		t.Fatal(err)
	}
	restart := func(fail func()) {
		t.Helper()
		saved := filepath.Join(t.TempDir(), "restart")
		if err := c.SaveState(ctx, saved); err != nil {
			t.Fatal(err)
		}
		before := c.OptimizerSteps()
		fail()
		if err := step(c); !errors.Is(err, learn.ErrLearner) {
			t.Fatalf("a step on a failed learner: %v", err)
		}
		p.Kill()
		p.Stop()
		p, _ = startTorch(t, dir, addr, time.Second)
		if err := c.Recover(ctx, saved, before); err != nil {
			t.Fatal(err)
		}
		if err := step(c); err != nil {
			t.Fatal(err)
		}
	}
	// Killed mid-step: its forward_backward was applied, its optim_step never is.
	restart(func() {
		if err := c.ForwardBackward(ctx, s, co); err != nil {
			t.Fatal(err)
		}
		p.Kill()
	})
	// Stops answering: the step's first call ends at its deadline.
	restart(p.Pause)
	if c.OptimizerSteps() != 3 {
		t.Fatalf("after two restarts the learner is at update %d, want 3", c.OptimizerSteps())
	}
	compare(t, "logprobs after the restarted steps", logprobs(c), want, 0, 0)
}
