package eval

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// parityEnv ends at the first step and succeeds exactly when its level is odd, whatever the
// policy says: the results per level are then known.
type parityEnv struct{ level int }

func (e *parityEnv) Reset(context.Context, int64) (env.Observation, error) {
	return env.Observation{System: "Reply.", Text: fmt.Sprintf("Level %d.", e.level)}, nil
}

func (e *parityEnv) Step(context.Context, string) (env.Transition, error) {
	ok := e.level%2 == 1
	r := 0.0
	if ok {
		r = 1
	}
	return env.Transition{Role: traj.RoleEnv, Done: true, Reward: r, Info: map[string]string{env.InfoSuccess: fmt.Sprint(ok)}}, nil
}

func paritySpec() env.Spec {
	at := func(l int) env.Spec {
		return env.Spec{
			Name: "parity", Train: env.SeedRange{Lo: 0, Hi: 100}, Heldout: env.SeedRange{Lo: 100, Hi: 200},
			New:    func() (env.Env, error) { return &parityEnv{level: l}, nil },
			Expert: func(int64, float64, *rand.Rand) env.Agent { return nil },
			Corpus: func(n int) []string { return make([]string, n) },
		}
	}
	s := at(1)
	s.Levels, s.AtLevel = []int{1, 2, 3}, at
	return s
}

// Evaluation at a difficulty reports each level's tasks and success: here odd levels always
// succeed and even ones never, with greedy and sampled decoding alike.
func TestRunPerLevel(t *testing.T) {
	m, tok, reg := tinyPolicy(t)
	if err := reg.Register(paritySpec()); err != nil {
		t.Fatal(err)
	}
	d := env.Difficulty{Levels: []int{3, 1, 2}}
	o := evalOptions(reg, 2)
	o.Env, o.Tasks, o.Difficulty = "parity", 30, &d
	res, err := Run(context.Background(), m, tok, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]int{}
	for i := range 30 {
		want[d.LevelOf(100+int64(i))]++
	}
	if len(res.Levels) != 3 {
		t.Fatalf("levels %+v", res.Levels)
	}
	odd := 0
	for i, lr := range res.Levels {
		rate := float64(lr.Level % 2)
		if lr.Level != i+1 || lr.Tasks != want[lr.Level] || lr.Pass1Greedy != rate || lr.Pass1 == nil || *lr.Pass1 != rate {
			t.Errorf("level %d: %+v (pass@1 %v), want %d tasks at rate %v", i+1, lr, lr.Pass1, want[i+1], rate)
		}
		if lr.Level%2 == 1 {
			odd += lr.Tasks
		}
	}
	if got := float64(odd) / 30; res.Pass1Greedy != got || *res.Pass1Sampled != got {
		t.Errorf("overall pass@1 %v / %v, want %v", res.Pass1Greedy, *res.Pass1Sampled, got)
	}
	// Without a difficulty there are no levels.
	o.Difficulty = nil
	if res, err := Run(context.Background(), m, tok, 0, o); err != nil || res.Levels != nil {
		t.Errorf("no difficulty: levels %+v, %v", res.Levels, err)
	}
	o.Difficulty = &env.Difficulty{Levels: []int{4}}
	if _, err := Run(context.Background(), m, tok, 0, o); err == nil {
		t.Error("level 4 accepted")
	}
}
