package local

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/infer"
)

// The scorer gives the logprobs the engine sampled with (temperature 1, float32): a teacher that
// is the sampling policy itself has zero KL to it.
func TestScorerMatchesEngine(t *testing.T) {
	m := tinyModel(t, 3)
	e := newEngine(t, m, 2)
	sc, err := NewScorer(m.Clone(), 7)
	if err != nil {
		t.Fatal(err)
	}
	for s := uint64(0); s < 4; s++ {
		p := prompt(s, 4+int(s)*5)
		c, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 16, Sampling: infer.Sampling{Temperature: 1}, Seed: s})
		if err != nil {
			t.Fatal(err)
		}
		lps, v, err := sc.ScoreVersion(context.Background(), infer.ScoreRequest{Tokens: append(slices.Clone(p), c.Tokens...), Start: len(p)})
		if err != nil {
			t.Fatal(err)
		}
		if v != 7 || len(lps) != len(c.Tokens) {
			t.Fatalf("version %d, %d logprobs for %d tokens", v, len(lps), len(c.Tokens))
		}
		for i := range lps {
			if d := math.Abs(float64(lps[i] - c.Logprobs[i])); d > 1e-4 {
				t.Fatalf("seed %d token %d: scored %v, sampled with %v", s, i, lps[i], c.Logprobs[i])
			}
		}
	}
	other := tinyModel(t, 4)
	if err := sc.Set(other, 8); err != nil {
		t.Fatal(err)
	}
	req := infer.ScoreRequest{Tokens: prompt(9, 12), Start: 3}
	a, _ := sc.Score(context.Background(), req)
	want := learnerLogprobs(t, other, req.Tokens[:3], req.Tokens[3:])
	if !slices.Equal(a, want) {
		t.Fatalf("after Set: %v, the new weights give %v", a, want)
	}
}

func TestScorerRefuses(t *testing.T) {
	m := tinyModel(t, 3)
	sc, _ := NewScorer(m, 0)
	for _, req := range []infer.ScoreRequest{
		{Tokens: []int32{1, 2}, Start: 0},
		{Tokens: []int32{1, 2}, Start: 2},
		{Tokens: []int32{1, 64, 2}, Start: 1},
		{Tokens: []int32{1, -2, 2}, Start: 1},
		{Tokens: make([]int32, 97), Start: 1},
	} {
		if _, err := sc.Score(context.Background(), req); err == nil {
			t.Errorf("%v accepted", req)
		}
	}
	bad := m.Clone()
	for i := range bad.Params.Data {
		bad.Params.Data[i] = float32(math.NaN())
	}
	sc.Set(bad, 1)
	if _, err := sc.Score(context.Background(), infer.ScoreRequest{Tokens: []int32{1, 2, 3}, Start: 1}); !errors.Is(err, infer.ErrBadScores) {
		t.Fatalf("broken weights: %v, want ErrBadScores", err)
	}
}
