package local

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
)

func tinyModel(t testing.TB, seed uint64) *model.Model {
	t.Helper()
	cfg := model.Config{Vocab: 64, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 96,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m, err := model.New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newEngine(t testing.TB, m *model.Model, slots int) *Engine {
	t.Helper()
	e, err := NewEngine(m, 7, EngineConfig{Slots: slots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func prompt(seed uint64, n int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(rng.IntN(64))
	}
	return p
}

// learnerLogprobs recomputes, with a full forward pass, the logprob of every completion token.
func learnerLogprobs(t *testing.T, m *model.Model, p, comp []int32) []float32 {
	t.Helper()
	seq := append(slices.Clone(p), comp...)
	n := len(seq) - 1
	b := &model.Batch{Rows: 1, T: n, Tokens: seq[:n], Targets: make([]int32, n), Pos: make([]int32, n), Seg: make([]int32, n)}
	for i := 0; i < n; i++ {
		b.Targets[i] = -1
		if i >= len(p)-1 {
			b.Targets[i] = seq[i+1]
		}
		b.Pos[i] = int32(i)
	}
	lp := make([]float32, n)
	ent := make([]float32, n)
	if err := m.Forward(b, lp, ent); err != nil {
		t.Fatal(err)
	}
	return lp[len(p)-1:]
}

func TestEngineLogprobsMatchLearner(t *testing.T) {
	m := tinyModel(t, 1)
	e := newEngine(t, m, 4)
	for s := uint64(0); s < 6; s++ {
		p := prompt(s, 5+int(s)*3)
		c, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 20, Sampling: infer.Sampling{Temperature: 1}, Seed: s})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Tokens) != 20 || c.Finish != infer.FinishLength {
			t.Fatalf("got %d tokens finish %s", len(c.Tokens), c.Finish)
		}
		want := learnerLogprobs(t, m, p, c.Tokens)
		for i := range want {
			if d := math.Abs(float64(want[i] - c.Logprobs[i])); d > 1e-4 {
				t.Fatalf("seed %d token %d: engine logprob %v, learner %v", s, i, c.Logprobs[i], want[i])
			}
			if c.Versions[i] != 7 {
				t.Fatalf("token %d version %d, want 7", i, c.Versions[i])
			}
		}
	}
}

func TestEngineConcurrentEqualsSequential(t *testing.T) {
	m := tinyModel(t, 2)
	reqs := make([]infer.Request, 24)
	for i := range reqs {
		reqs[i] = infer.Request{Prompt: prompt(uint64(i), 3+i%7), MaxTokens: 10 + i%9, Sampling: infer.Sampling{Temperature: 1}, Seed: uint64(100 + i)}
		if i%3 == 0 {
			reqs[i].Stop = []int32{int32(i % 64)}
		}
	}
	seq := newEngine(t, m, 1)
	want := make([]infer.Completion, len(reqs))
	for i, r := range reqs {
		c, err := seq.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = c
	}
	par := newEngine(t, m, 5) // fewer slots than requests: they join and leave between steps
	got := make([]infer.Completion, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := par.Generate(context.Background(), r)
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		}()
	}
	wg.Wait()
	for i := range reqs {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) || got[i].Finish != want[i].Finish {
			t.Fatalf("request %d: batched %v (%s), alone %v (%s)", i, got[i].Tokens, got[i].Finish, want[i].Tokens, want[i].Finish)
		}
		for k := range got[i].Logprobs {
			if d := math.Abs(float64(got[i].Logprobs[k] - want[i].Logprobs[k])); d > 1e-5 {
				t.Fatalf("request %d token %d: logprob %v batched, %v alone", i, k, got[i].Logprobs[k], want[i].Logprobs[k])
			}
		}
	}
}

func TestEngineStopAndGreedy(t *testing.T) {
	m := tinyModel(t, 3)
	e := newEngine(t, m, 2)
	p := prompt(9, 6)
	g, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	// Greedy is a point mass: logprob 0; and top-k 1 at any temperature is the same choice.
	k1, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 1.3, TopK: 1}, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Tokens, k1.Tokens) {
		t.Fatalf("greedy %v differs from top-k 1 %v", g.Tokens, k1.Tokens)
	}
	for i := range g.Tokens {
		if g.Logprobs[i] != 0 || k1.Logprobs[i] != 0 {
			t.Fatalf("token %d: greedy logprob %v, top-k 1 logprob %v; want 0", i, g.Logprobs[i], k1.Logprobs[i])
		}
	}
	stop := g.Tokens[4]
	s, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 12, Stop: []int32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Index(g.Tokens, stop)
	if s.Finish != infer.FinishStop || !slices.Equal(s.Tokens, g.Tokens[:first+1]) {
		t.Fatalf("stop at %d: got %v (%s), want %v", stop, s.Tokens, s.Finish, g.Tokens[:first+1])
	}
}

func TestEngineTopPRenormalizes(t *testing.T) {
	m := tinyModel(t, 4)
	e := newEngine(t, m, 1)
	p := prompt(1, 4)
	c, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 30, Sampling: infer.Sampling{Temperature: 1, TopP: 0.5}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	full, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 1, Sampling: infer.Sampling{Temperature: 1}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	_ = full
	want := learnerLogprobs(t, m, p, c.Tokens)
	for i := range want {
		// Renormalizing over the nucleus can only raise a token's probability.
		if c.Logprobs[i] < want[i]-1e-5 {
			t.Fatalf("token %d: nucleus logprob %v below full-softmax logprob %v", i, c.Logprobs[i], want[i])
		}
	}
}

func TestEngineLoadWeightsChangesVersionMidCompletion(t *testing.T) {
	m := tinyModel(t, 5)
	other := tinyModel(t, 6)
	e := newEngine(t, m, 2)
	ctx := context.Background()
	res := make(chan infer.Completion, 1)
	go func() {
		c, err := e.Generate(ctx, infer.Request{Prompt: prompt(1, 4), MaxTokens: 80, Sampling: infer.Sampling{Temperature: 1}, Seed: 1})
		if err != nil {
			t.Error(err)
		}
		res <- c
	}()
	time.Sleep(time.Millisecond) // let it start decoding; the assertion below holds either way
	applied, err := e.LoadWeights(other, 8)
	if err != nil {
		t.Fatal(err)
	}
	<-applied
	c := <-res
	if e.Version() != 8 {
		t.Fatalf("engine version %d, want 8", e.Version())
	}
	switched := -1
	for i, v := range c.Versions {
		if v != 7 && v != 8 {
			t.Fatalf("token %d has version %d", i, v)
		}
		if i > 0 && c.Versions[i-1] == 8 && v == 7 {
			t.Fatalf("version went back from 8 to 7 at token %d", i)
		}
		if v == 8 && switched < 0 {
			switched = i
		}
	}
	// A request after the switch uses the new weights only.
	c2, err := e.Generate(ctx, infer.Request{Prompt: prompt(2, 4), MaxTokens: 5, Sampling: infer.Sampling{Temperature: 1}, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range c2.Versions {
		if v != 8 {
			t.Fatalf("after LoadWeights a new request got version %d", v)
		}
	}
	if _, err := e.LoadWeights(tinyModelCfg(t), 9); err == nil {
		t.Fatal("LoadWeights accepted a model of another config")
	}
}

func tinyModelCfg(t *testing.T) *model.Model {
	cfg := model.Config{Vocab: 64, Dim: 16, Layers: 1, Heads: 2, KVHeads: 2, Hidden: 16, MaxSeq: 32,
		RopeTheta: 10000, NormEps: 1e-5}
	m, err := model.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEngineBadRequests(t *testing.T) {
	e := newEngine(t, tinyModel(t, 7), 1)
	cases := []infer.Request{
		{Prompt: nil, MaxTokens: 1},
		{Prompt: []int32{1}, MaxTokens: 0},
		{Prompt: []int32{1, 64}, MaxTokens: 1},
		{Prompt: []int32{-1}, MaxTokens: 1},
		{Prompt: make([]int32, 96), MaxTokens: 1},
		{Prompt: []int32{1}, MaxTokens: 1, Stop: []int32{99}},
		{Prompt: []int32{1}, MaxTokens: 1, Sampling: infer.Sampling{Temperature: float32(math.NaN())}},
		{Prompt: []int32{1}, MaxTokens: 1, Sampling: infer.Sampling{Temperature: 1, TopP: 2}},
		{Prompt: []int32{1}, MaxTokens: 1, Sampling: infer.Sampling{Temperature: 1, TopK: -1}},
	}
	for i, r := range cases {
		if _, err := e.Generate(context.Background(), r); err == nil {
			t.Errorf("case %d: bad request accepted", i)
		}
	}
	// The completion never runs past the sequence length.
	c, err := e.Generate(context.Background(), infer.Request{Prompt: make([]int32, 90), MaxTokens: 50, Sampling: infer.Sampling{Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tokens) != 6 || c.Finish != infer.FinishLength {
		t.Fatalf("got %d tokens (%s), want 6 (length)", len(c.Tokens), c.Finish)
	}
}

// A sequence length the model cannot hold is an error, not silently shortened.
func TestNewEngineRejectsBadConfig(t *testing.T) {
	m := tinyModel(t, 7)
	for _, cfg := range []EngineConfig{{Slots: 0}, {Slots: 1, MaxLen: -1}, {Slots: 1, MaxLen: m.Cfg.MaxSeq + 1}} {
		if e, err := NewEngine(m, 0, cfg); err == nil {
			e.Close()
			t.Errorf("%+v: accepted", cfg)
		}
	}
	for _, n := range []int{0, m.Cfg.MaxSeq} {
		e, err := NewEngine(m, 0, EngineConfig{Slots: 1, MaxLen: n})
		if err != nil {
			t.Fatalf("MaxLen %d: %v", n, err)
		}
		e.Close()
	}
}

func TestEngineCancelAndClose(t *testing.T) {
	e, err := NewEngine(tinyModel(t, 8), 0, EngineConfig{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Generate(ctx, infer.Request{Prompt: []int32{1}, MaxTokens: 5}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: err = %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Generate(context.Background(), infer.Request{Prompt: []int32{1, 2}, MaxTokens: 90, Sampling: infer.Sampling{Temperature: 1}, Seed: uint64(i)})
			errs <- err
		}()
	}
	time.Sleep(2 * time.Millisecond)
	e.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("request during close: %v", err)
		}
	}
	if _, err := e.Generate(context.Background(), infer.Request{Prompt: []int32{1}, MaxTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: err = %v", err)
	}
}

// The next turn of an episode reuses the keys its slot already holds; what it generates is
// bit-for-bit what a cold engine generates for the same prompt.
func TestEngineReusesPrefixExactly(t *testing.T) {
	m := tinyModel(t, 9)
	warm := newEngine(t, m, 2)
	ctx := context.Background()
	p := prompt(3, 9)
	first, err := warm.Generate(ctx, infer.Request{Prompt: p, MaxTokens: 7, Sampling: infer.Sampling{Temperature: 1}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := append(append(slices.Clone(p), first.Tokens...), 5, 6, 7)
	req := infer.Request{Prompt: next, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 1}, Seed: 2}
	got, err := warm.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cold := newEngine(t, m, 2)
	want, err := cold.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(got.Logprobs, want.Logprobs) {
		t.Fatalf("warm slot gave %v %v, cold %v %v", got.Tokens, got.Logprobs, want.Tokens, want.Logprobs)
	}
	// A prompt that only shares a prefix with the cached tokens must not reuse the rest.
	other := append(slices.Clone(p[:4]), 1, 2, 3)
	req2 := infer.Request{Prompt: other, MaxTokens: 6, Sampling: infer.Sampling{Temperature: 1}, Seed: 3}
	a, err := warm.Generate(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cold.Generate(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.Logprobs, b.Logprobs) {
		t.Fatalf("diverging prompt: warm %v, cold %v", a.Tokens, b.Tokens)
	}
}

// Broken weights give an error that says so, naming the version, and that callers can tell from
// a failed request (infer.ErrNonFinite); the engine keeps serving once the weights are mended.
func TestEngineNonFiniteLogits(t *testing.T) {
	m := tinyModel(t, 1)
	bad := m.Clone()
	bad.Params.Data[len(bad.Params.Data)/2] = float32(math.NaN())
	e := newEngine(t, bad, 2)
	req := infer.Request{Prompt: prompt(1, 6), MaxTokens: 4, Sampling: infer.Sampling{Temperature: 1}, Seed: 1}
	_, err := e.Generate(context.Background(), req)
	if !errors.Is(err, infer.ErrNonFinite) || !errors.Is(err, ErrNonFinite) {
		t.Fatalf("err = %v, want infer.ErrNonFinite", err)
	}
	for _, want := range []string{"non-finite logits", "version 7", "weights are broken"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
	applied, err := e.LoadWeights(m, 8)
	if err != nil {
		t.Fatal(err)
	}
	<-applied
	if _, err := e.Generate(context.Background(), req); err != nil {
		t.Fatalf("after finite weights: %v", err)
	}
}

// With SwapAtCompletion, weights loaded while a completion decodes wait for it to end: the
// completion is sampled by the old version alone (token for token what the old weights alone
// produce), a request submitted after the load waits and is sampled by the new version alone.
func TestEngineSwapAtCompletionKeepsEachCompletionOnOneVersion(t *testing.T) {
	m, other := tinyModel(t, 5), tinyModel(t, 6)
	e, err := NewEngine(m, 7, EngineConfig{Slots: 2, SwapAtCompletion: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	req := infer.Request{Prompt: prompt(1, 4), MaxTokens: 60, Sampling: infer.Sampling{Temperature: 1}, Seed: 1}
	ref, err := newEngine(t, m, 2).Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	res := make(chan infer.Completion, 1)
	go func() {
		c, err := e.GenerateStream(ctx, req, func(Step) { once.Do(func() { close(started) }) })
		if err != nil {
			t.Error(err)
		}
		res <- c
	}()
	<-started // decoding under version 7
	applied, err := e.LoadWeights(other, 8)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.Generate(ctx, infer.Request{Prompt: prompt(2, 4), MaxTokens: 5, Sampling: infer.Sampling{Temperature: 1}, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-applied
	c := <-res
	if !slices.Equal(c.Tokens, ref.Tokens) {
		t.Fatalf("the completion in flight changed under the pending weights: %v, alone %v", c.Tokens, ref.Tokens)
	}
	for i, v := range c.Versions {
		if v != 7 {
			t.Fatalf("token %d of the completion in flight has version %d, want 7", i, v)
		}
	}
	for i, v := range c2.Versions {
		if v != 8 {
			t.Fatalf("token %d of the request made after the load has version %d, want 8", i, v)
		}
	}
}
