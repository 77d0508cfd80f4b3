package algo

import (
	"math"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// toolBatch is a group of two episodes, "user assistant assistant tool tool assistant env" with
// reward 1 and "user assistant tool assistant env" with reward 0.
func toolBatch() *Batch {
	u, a, tl, e := traj.RoleUser, traj.RoleAssistant, traj.RoleTool, traj.RoleEnv
	b := &Batch{
		Offsets: []int{0, 7, 12},
		Roles:   []traj.Role{u, a, a, tl, tl, a, e, u, a, tl, a, e},
		Groups:  []uint64{1, 1},
		Rewards: []float64{1, 0},
		Status:  []traj.Status{traj.StatusOK, traj.StatusOK},
	}
	for _, r := range b.Roles {
		b.Mask = append(b.Mask, r == a)
		b.Behaviour = append(b.Behaviour, 0)
	}
	return b
}

// Training on tool tokens (Search-R1's "w/o mask" ablation) by hand: GRPO gives both episodes
// ±1/√2 (rewards 1 and 0: mean ½, unbiased std 1/√2, GRPO's ε = 1e-6 aside) on every masked token, the tool's included;
// REINFORCE at ratio 1 has ℓ = −A per token, and token-mean divides by the masked tokens: 5
// without the tool's, 8 with them. Loss: −(3 − 2)/√2/5 masked, −(5 − 3)/√2/8 unmasked.
func TestTrainOnToolTokens(t *testing.T) {
	r := 1 / math.Sqrt2
	for _, tc := range []struct {
		name  string
		tools bool
		loss  float64
		dTool float64 // d(loss)/d(logπ) at the first episode's first tool token
		dAsst float64 // and at its first assistant token
	}{
		{"masked", false, -r / 5, 0, -r / 5},
		{"trained", true, -2 * r / 8, -r / 8, -r / 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := toolBatch()
			if tc.tools {
				if err := b.TrainOnToolTokens(); err != nil {
					t.Fatal(err)
				}
			}
			est, _ := NewEstimator(AdvantageConfig{Name: "grpo"})
			if _, err := est.Estimate(b); err != nil {
				t.Fatal(err)
			}
			if tc.tools && (!near(float64(b.Advantages[3]), r, 1e-5) || !near(float64(b.Advantages[9]), -r, 1e-5)) {
				t.Fatalf("tool tokens' advantages %v, want the sequences' ±1/√2", b.Advantages)
			}
			if b.Advantages[6] != 0 || b.Advantages[11] != 0 {
				t.Fatalf("environment tokens got advantages %v", b.Advantages)
			}
			// The minibatch keeps the tool tokens in its loss.
			mb, err := b.Select([]int{1, 0})
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewLoss(DefaultLossConfig().WithPolicy("reinforce"))
			if err != nil {
				t.Fatal(err)
			}
			var out Output
			if err := l.Compute(&out, mb, Current{Logprobs: make([]float32, 12)}); err != nil {
				t.Fatal(err)
			}
			// In the minibatch the first episode starts at token 5: its tool token 3 is at 8.
			if !near(out.Loss, tc.loss, 1e-5) || !near(float64(out.DLogprobs[8]), tc.dTool, 1e-5) || !near(float64(out.DLogprobs[6]), tc.dAsst, 1e-5) {
				t.Fatalf("loss %v, d at tool %v, at assistant %v; want %v %v %v", out.Loss, out.DLogprobs[8], out.DLogprobs[6], tc.loss, tc.dTool, tc.dAsst)
			}
		})
	}
}

// A tool token in the mask is refused unless the batch says tool tokens train; only tool tokens
// join the mask; a batch without roles cannot say which tokens are the tool's; and the estimators
// that credit turns apart (which would give tool tokens nothing) say so.
func TestToolTokensRefusedAndTurnCredit(t *testing.T) {
	b := toolBatch()
	b.Mask[3] = true
	if err := b.Validate(); err == nil || !strings.Contains(err.Error(), "loss mask set on a tool token") {
		t.Fatalf("tool token in the mask: %v", err)
	}
	b.Mask[3] = false
	if err := b.TrainOnToolTokens(); err != nil {
		t.Fatal(err)
	}
	for i, r := range b.Roles {
		if b.Mask[i] != (r == traj.RoleAssistant || r == traj.RoleTool) {
			t.Fatalf("token %d (%s): mask %v", i, r, b.Mask[i])
		}
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (&Batch{Offsets: []int{0, 1}, Mask: []bool{true}, Behaviour: []float32{0}}).TrainOnToolTokens(); err == nil {
		t.Fatal("a batch without roles was accepted")
	}
	for name, want := range map[string]bool{"grpo": false, "rloo": false, "reinforce++": false, "gae": false, "gae-turn": true, "gigpo": true, "turn-return": true} {
		c, _ := DefaultAdvantageConfig(name)
		e, err := NewEstimator(c)
		if err != nil {
			t.Fatal(err)
		}
		if CreditsTurns(e) != want {
			t.Errorf("CreditsTurns(%s) = %v, want %v", name, !want, want)
		}
	}
}
