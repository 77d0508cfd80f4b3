package algo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// withTeacher gives b teacher logprobs on its distill tokens (0 elsewhere).
func withTeacher(rng *rand.Rand, b *Batch) {
	b.Teacher = make([]float32, b.NumTokens())
	for t := range b.Teacher {
		if b.DistillMask(t) {
			b.Teacher[t] = b.Old[t] + float32(awayFrom(rng, 0.6, []float64{0}))
		}
	}
}

// The loss term's gradient is its derivative, for k1 and k3 (finite differences).
func TestDistillLossFiniteDifferences(t *testing.T) {
	for _, name := range []string{"k1", "k3", "k2"} {
		rng := rand.New(rand.NewPCG(3, uint64(len(name))))
		b, cur := randomBatch(rng, 8, 20)
		withTeacher(rng, b)
		mustEstimate(t, b, "grpo", nil)
		base, err := NewLoss(DefaultLossConfig())
		if err != nil {
			t.Fatal(err)
		}
		est, _ := ParseKL(name)
		l, err := base.WithDistill(0.7, est)
		if err != nil {
			t.Fatal(err)
		}
		var out, plain Output
		if err := l.Compute(&out, b, cur); err != nil {
			t.Fatal(err)
		}
		if err := base.Compute(&plain, b, cur); err != nil {
			t.Fatal(err)
		}
		if out.Loss == plain.Loss || out.Metrics["loss/distill"] == 0 {
			t.Fatalf("%s: the distillation term changed nothing (%v)", name, out.Metrics)
		}
		eval := func() float64 {
			var o Output
			if err := l.Compute(&o, b, cur); err != nil {
				t.Fatal(err)
			}
			return o.Loss
		}
		for tok := 0; tok < b.NumTokens(); tok += 2 {
			fd := central(cur.Logprobs, nil, tok, 1e-3, eval)
			if math.Abs(fd-float64(out.DLogprobs[tok])) > 2e-4*math.Max(1, math.Abs(fd)) {
				t.Errorf("%s token %d: gradient %v, finite difference %v", name, tok, out.DLogprobs[tok], fd)
			}
		}
	}
}

func TestDistillLossNeedsTeacher(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	b, cur := randomBatch(rng, 4, 10)
	mustEstimate(t, b, "grpo", nil)
	base, _ := NewLoss(DefaultLossConfig())
	est, _ := ParseKL("k1")
	l, _ := base.WithDistill(1, est)
	var out Output
	if err := l.Compute(&out, b, cur); err == nil {
		t.Fatal("a distillation term without teacher logprobs was computed")
	}
	if _, err := base.WithDistill(0, est); err == nil {
		t.Fatal("coefficient 0 accepted")
	}
	if _, err := base.WithDistill(math.NaN(), est); err == nil {
		t.Fatal("coefficient NaN accepted")
	}
}

// Advantage mode: A_t += −coef·(logπ_old − logπ_T) on the policy's tokens only, never on a tool's
// token in the loss (ToolInLoss) or on a failed sequence.
func TestApplyDistillAdvantage(t *testing.T) {
	b := build(seqSpec{mask: ".mm.m", group: 1, reward: 1}, seqSpec{mask: ".mm", group: 1, reward: 0}, seqSpec{mask: ".m", group: 1, status: traj.StatusEnvError})
	b.Roles = []traj.Role{traj.RoleUser, traj.RoleAssistant, traj.RoleAssistant, traj.RoleTool, traj.RoleAssistant,
		traj.RoleUser, traj.RoleAssistant, traj.RoleAssistant, traj.RoleUser, traj.RoleAssistant}
	b.Old = []float32{0, -1, -2, -0.5, -1, 0, -0.5, -3, 0, -1}
	b.Teacher = []float32{0, -0.5, -1, 0, -2, 0, -0.5, -1, 0, -0.1}
	b.Mask[3] = true // the tool token trains (ToolInLoss) but the teacher never judges it
	b.ToolInLoss = true
	b.Advantages = []float32{0, 1, 1, 1, 1, 0, -1, -1, 0, 0}
	m, err := ApplyDistillAdvantage(b, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 1 - 2*(-1+0.5), 1 - 2*(-2+1), 1, 1 - 2*(-1+2), 0, -1, -1 - 2*(-3+1), 0, 0}
	for i := range want {
		if math.Abs(float64(b.Advantages[i]-want[i])) > 1e-6 {
			t.Fatalf("advantages %v, want %v", b.Advantages, want)
		}
	}
	// k1 over tokens 1, 2, 4, 6, 7: (−0.5 − 1 + 1 + 0 − 2)/5.
	if got := m["distill/kl_mean"]; math.Abs(got-(-2.5/5)) > 1e-9 || m["distill/tokens"] != 5 {
		t.Fatalf("metrics %v", m)
	}
	// The signal's spread over the same tokens: |k1| at most 2 (token 7), teacher logprobs from
	// −2 (token 4) to −0.5 (tokens 1, 6).
	if m["distill/kl_abs_max"] != 2 || m["distill/teacher_lp_range"] != 1.5 {
		t.Fatalf("kl_abs_max %v, teacher_lp_range %v, want 2 and 1.5", m["distill/kl_abs_max"], m["distill/teacher_lp_range"])
	}
	// |distill| = 2·(0.5+1+1+0+2) = 9, |env| = 1+1+1+1+1 = 5.
	if got := m["distill/adv_share"]; math.Abs(got-9.0/14) > 1e-9 {
		t.Fatalf("adv_share %v, want %v", got, 9.0/14)
	}
	// only: the estimated advantages go, the teacher's term alone stays.
	b.Advantages = []float32{0, 1, 1, 1, 1, 0, -1, -1, 0, 0}
	if _, err := ApplyDistillAdvantage(b, 1, true); err != nil {
		t.Fatal(err)
	}
	want = []float32{0, 0.5, 1, 0, -1, 0, 0, 2, 0, 0}
	for i := range want {
		if math.Abs(float64(b.Advantages[i]-want[i])) > 1e-6 {
			t.Fatalf("only: advantages %v, want %v", b.Advantages, want)
		}
	}
	if _, err := ApplyDistillAdvantage(b, -1, false); err == nil {
		t.Fatal("negative coefficient accepted")
	}
	b.Teacher[2] = float32(math.NaN())
	if _, err := ApplyDistillAdvantage(b, 1, false); err == nil {
		t.Fatal("a NaN teacher logprob was trained on")
	}
}
