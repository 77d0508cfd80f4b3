package eval

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
)

// tinyPolicy is an untrained model with a tokenizer for calc: enough to run episodes.
func tinyPolicy(t *testing.T) (*model.Model, *tokenizer.Tokenizer, *env.Registry) {
	t.Helper()
	reg := env.NewRegistry()
	if err := reg.Register(calc.Spec()); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train(calc.Spec().Corpus(20), tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Vocab: 300, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 24, MaxSeq: 512,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok, reg
}

func evalOptions(reg *env.Registry, k int) Options {
	rc := rollout.DefaultConfig()
	rc.MaxTurns, rc.MaxContext, rc.MaxTokensPerTurn = 2, 512, 8
	return Options{Env: "calc", Tasks: 3, K: k, Seed: 1, Rollout: rc, Slots: 4, Envs: reg}
}

// A policy whose weights are NaN cannot act: evaluating it is an error naming the cause, not a
// result of 0% with every episode recorded as an environment failure.
func TestRunStopsOnBrokenWeights(t *testing.T) {
	m, tok, reg := tinyPolicy(t)
	for _, tn := range m.Params.Tensors() {
		if tn.Name == "model.norm.weight" {
			tn.Data[0] = float32(math.NaN())
		}
	}
	res, err := Run(context.Background(), m, tok, 5, evalOptions(reg, 0))
	if !errors.Is(err, infer.ErrNonFinite) || !strings.Contains(err.Error(), "version 5") {
		t.Fatalf("Run: err = %v (statuses %v), want infer.ErrNonFinite at version 5", err, res.Statuses)
	}
}

// Failed episodes are counted by status for greedy and sampled decoding, and the first failure's
// error is kept.
func TestRunCountsFailures(t *testing.T) {
	m, tok, reg := tinyPolicy(t)
	o := evalOptions(reg, 2)
	o.NewEnv = func(string) (env.Env, error) { return nil, errors.New("sandbox unavailable") }
	res, err := Run(context.Background(), m, tok, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses["env_error"] != 3 || res.StatusesSampled["env_error"] != 6 || res.Failed() != 9 {
		t.Fatalf("statuses %v sampled %v failed %d, want 3, 6 and 9 env_error", res.Statuses, res.StatusesSampled, res.Failed())
	}
	if !strings.Contains(res.FirstFailure, "sandbox unavailable") {
		t.Fatalf("first failure %q", res.FirstFailure)
	}
}
