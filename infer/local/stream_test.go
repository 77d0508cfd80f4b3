package local

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/infer"
)

// GenerateStream reports every token of the completion, in order, with the completion's
// logprobs and versions, and TopLogprobs agrees with the sampler on each drawn token.
func TestGenerateStreamMatchesGenerate(t *testing.T) {
	m := tinyModel(t, 3)
	e := newEngine(t, m, 4)
	for i, s := range []infer.Sampling{{Temperature: 1}, {Temperature: 0.7, TopK: 5}, {Temperature: 1.3, TopP: 0.8}, {}} {
		req := infer.Request{Prompt: prompt(uint64(i), 6), MaxTokens: 12, Sampling: s, Seed: uint64(i)}
		want, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var steps []Step
		got, err := e.GenerateStream(context.Background(), req, func(st Step) {
			top := TopLogprobs(st.Logits, s, 64)
			k := slices.IndexFunc(top, func(c TokenLogprob) bool { return c.Token == st.Token })
			if k < 0 || math.Float32bits(top[k].Logprob) != math.Float32bits(st.Logprob) {
				t.Errorf("sampling %+v: token %d logprob %v not in top logprobs %v", s, st.Token, st.Logprob, top)
			}
			st.Logits = nil
			steps = append(steps, st)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(got.Logprobs, want.Logprobs) {
			t.Fatalf("sampling %+v: stream %v differs from generate %v", s, got, want)
		}
		if len(steps) != len(got.Tokens) {
			t.Fatalf("%d steps for %d tokens", len(steps), len(got.Tokens))
		}
		for k, st := range steps {
			if st.Token != got.Tokens[k] || st.Logprob != got.Logprobs[k] || st.Version != got.Versions[k] {
				t.Fatalf("step %d = %+v, completion has %d %v %d", k, st, got.Tokens[k], got.Logprobs[k], got.Versions[k])
			}
		}
	}
}

// Cancelling a streaming request ends it at the next decode step: no more tokens are reported.
func TestGenerateStreamCancel(t *testing.T) {
	m := tinyModel(t, 4)
	e := newEngine(t, m, 2)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := e.GenerateStream(ctx, infer.Request{Prompt: prompt(1, 4), MaxTokens: 50, Sampling: infer.Sampling{Temperature: 1}}, func(Step) {
		n++
		if n == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Fatalf("err %v after %d steps, want context.Canceled after 3", err, n)
	}
}

func TestTopLogprobsNormalized(t *testing.T) {
	logits := []float32{1, 3, 2, 3, -1}
	for _, s := range []infer.Sampling{{Temperature: 1}, {Temperature: 0.5, TopK: 3}, {Temperature: 1, TopP: 0.6}} {
		top := TopLogprobs(logits, s, 10)
		var sum float64
		for _, c := range top {
			sum += math.Exp(float64(c.Logprob))
		}
		if math.Abs(sum-1) > 1e-6 || top[0].Token != 1 || top[1].Token != 3 {
			t.Fatalf("%+v: %v sums to %v", s, top, sum)
		}
	}
	if got := TopLogprobs(logits, infer.Sampling{}, 3); len(got) != 1 || got[0].Token != 1 || got[0].Logprob != 0 {
		t.Fatalf("greedy: %v", got)
	}
}
