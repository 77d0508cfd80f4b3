package local

import (
	"context"
	"math"
	"testing"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
)

// TestEngineBF16LogprobsCloseButNotExact: an engine decoding with bfloat16 weights, a bfloat16 KV
// cache or both says so (Precision, not Exact), reports logprobs that are close to the learner's
// float32 recomputation of the same tokens but not equal to it, and keeps decoding in bfloat16
// after a weight load.
func TestEngineBF16LogprobsCloseButNotExact(t *testing.T) {
	for _, prec := range []model.DecodePrecision{{Weights: model.BF16}, {KVCache: model.BF16}, {Weights: model.BF16, KVCache: model.BF16}} {
		t.Run(prec.String(), func(t *testing.T) { checkBF16Engine(t, prec) })
	}
	m := tinyModel(t, 1)
	for _, bad := range []model.DecodePrecision{{Weights: "fp8"}, {KVCache: "int8"}} {
		if _, err := NewEngine(m, 0, EngineConfig{Slots: 1, Precision: bad}); err == nil {
			t.Fatalf("precision %+v was accepted", bad)
		}
	}
}

func checkBF16Engine(t *testing.T, prec model.DecodePrecision) {
	m := tinyModel(t, 1)
	e, err := NewEngine(m, 7, EngineConfig{Slots: 4, Precision: prec})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want, _ := prec.Normalize()
	if got := e.Precision(); got != want || got.Exact() {
		t.Fatalf("engine precision %v (exact %v), want %v, not exact", got, got.Exact(), want)
	}
	check := func(m *model.Model, version int32) {
		t.Helper()
		var sumAbs, maxAbs float64
		n := 0
		for s := uint64(0); s < 6; s++ {
			p := prompt(s, 5+int(s)*3)
			c, err := e.Generate(context.Background(), infer.Request{Prompt: p, MaxTokens: 20, Sampling: infer.Sampling{Temperature: 1}, Seed: s})
			if err != nil {
				t.Fatal(err)
			}
			want := learnerLogprobs(t, m, p, c.Tokens)
			for i := range want {
				d := math.Abs(float64(want[i] - c.Logprobs[i]))
				sumAbs, maxAbs, n = sumAbs+d, max(maxAbs, d), n+1
				if c.Versions[i] != version {
					t.Fatalf("token %d version %d, want %d", i, c.Versions[i], version)
				}
			}
		}
		if maxAbs > 0.05 {
			t.Fatalf("version %d: bf16 logprobs differ from the learner's by up to %g", version, maxAbs)
		}
		if sumAbs == 0 {
			t.Fatalf("version %d: bf16 logprobs equal the learner's on all %d tokens", version, n)
		}
		t.Logf("version %d: |bf16 − f32 logprob| mean %.2e, max %.2e over %d tokens", version, sumAbs/float64(n), maxAbs, n)
	}
	check(m, 7)
	m2 := tinyModel(t, 2)
	applied, err := e.LoadWeights(m2, 8)
	if err != nil {
		t.Fatal(err)
	}
	<-applied
	check(m2, 8)
}
