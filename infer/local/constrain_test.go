package local

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/infer"
)

// evenThenOdd allows even token ids at even positions and odd ids at odd positions, below limit.
type evenThenOdd struct {
	n, limit int
	seen     []int32
}

func (c *evenThenOdd) Allow(allowed []bool) error {
	for i := range min(c.limit, len(allowed)) {
		allowed[i] = i%2 == c.n%2
	}
	return nil
}

func (c *evenThenOdd) Advance(tok int32) error {
	c.seen = append(c.seen, tok)
	c.n++
	return nil
}

// A constrained generation draws only allowed tokens, and each logprob is the log-softmax of the
// tempered logits over the allowed tokens (the distribution sampled from), token-exact with
// TopLogprobs of the masked logits. Without a constraint it is Generate, bit for bit.
func TestGenerateConstrained(t *testing.T) {
	m := tinyModel(t, 3)
	e := newEngine(t, m, 4)
	for i, s := range []infer.Sampling{{Temperature: 1}, {Temperature: 0.7, TopK: 50}, {Temperature: 1.3, TopP: 0.9}, {}} {
		req := infer.Request{Prompt: prompt(uint64(i), 6), MaxTokens: 12, Sampling: s, Seed: uint64(i)}
		want, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		same, err := e.GenerateConstrained(context.Background(), req, nil, nil)
		if err != nil || !slices.Equal(same.Tokens, want.Tokens) || !slices.Equal(same.Logprobs, want.Logprobs) {
			t.Fatalf("sampling %+v: no constraint gave %v, Generate %v (%v)", s, same, want, err)
		}
		con := &evenThenOdd{limit: 20}
		got, err := e.GenerateConstrained(context.Background(), req, con, func(st Step) {
			var sum float64
			inv := 1 / float64(s.Temperature)
			maxL := math.Inf(-1)
			for _, l := range st.Logits {
				maxL = math.Max(maxL, float64(l))
			}
			for k, l := range st.Logits {
				if math.IsInf(float64(l), -1) != (k >= 20 || k%2 != (len(con.seen)-1)%2) {
					t.Errorf("token %d: masked logit %v", k, l)
				}
				sum += math.Exp((float64(l) - maxL) * inv)
			}
			if st.Token >= 20 || int(st.Token)%2 != (len(con.seen)-1)%2 {
				t.Errorf("sampling %+v: token %d drawn at position %d", s, st.Token, len(con.seen))
			}
			if s.Temperature > 0 && s.TopK == 0 && s.TopP == 0 {
				lp := (float64(st.Logits[st.Token])-maxL)*inv - math.Log(sum)
				if math.Abs(lp-float64(st.Logprob)) > 1e-5 {
					t.Errorf("logprob %v, the masked distribution gives %v", st.Logprob, lp)
				}
			}
			top := TopLogprobs(st.Logits, s, 64)
			k := slices.IndexFunc(top, func(c TokenLogprob) bool { return c.Token == st.Token })
			if k < 0 || math.Float32bits(top[k].Logprob) != math.Float32bits(st.Logprob) || len(top) > 10 {
				t.Errorf("sampling %+v: token %d logprob %v against top logprobs %v", s, st.Token, st.Logprob, top)
			}
		})
		if err != nil || len(got.Tokens) != 12 || !slices.Equal(got.Tokens, con.seen) {
			t.Fatalf("sampling %+v: %v %v, advanced %v", s, got, err, con.seen)
		}
	}
	// A constraint that allows nothing fails the generation, not the engine.
	_, err := e.GenerateConstrained(context.Background(), infer.Request{Prompt: prompt(1, 3), MaxTokens: 3}, &evenThenOdd{limit: 0}, nil)
	if !errors.Is(err, ErrNoToken) {
		t.Fatalf("an empty mask: %v", err)
	}
	if _, err := e.Generate(context.Background(), infer.Request{Prompt: prompt(1, 3), MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
}
