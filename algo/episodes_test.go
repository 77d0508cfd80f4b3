package algo

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// episodeTraj builds an episode of turns: a 3-token prompt, then per turn a completion of 3
// sampled tokens and a 2-token observation. splitAfter lists the turns after which a new sample
// starts with a 4-token re-rendered context (no observation in the closing sample); with
// joined the same columns are one sample.
func episodeTraj(rng *rand.Rand, id string, group uint64, turns int, splitAfter []int, joined bool) *traj.Trajectory {
	t := &traj.Trajectory{ID: id, GroupID: group, Reward: float64(rng.IntN(3)) - 0.5}
	push := func(role traj.Role, n int) {
		for range n {
			t.Tokens = append(t.Tokens, rng.Int32N(50))
			t.Roles = append(t.Roles, role)
			sampled := role == traj.RoleAssistant
			t.LossMask = append(t.LossMask, sampled)
			if sampled {
				t.Logprobs = append(t.Logprobs, -rng.Float32())
				t.Versions = append(t.Versions, 1)
			} else {
				t.Logprobs = append(t.Logprobs, 0)
				t.Versions = append(t.Versions, traj.NoVersion)
			}
		}
	}
	push(traj.RoleUser, 3)
	for k := range turns {
		start := t.Len()
		push(traj.RoleAssistant, 3)
		tu := traj.Turn{Start: start, End: t.Len(), Reward: 0.1 * float64(rng.IntN(3))}
		if slices.Contains(splitAfter, k) && k < turns-1 {
			tu.ObsEnd = t.Len()
			t.Turns = append(t.Turns, tu)
			if !joined {
				t.Samples = append(t.Samples, t.Len())
			}
			push(traj.RoleTool, 4)
			continue
		}
		push(traj.RoleTool, 2)
		tu.ObsEnd = t.Len()
		t.Turns = append(t.Turns, tu)
	}
	return t
}

// splitAndJoined returns the same episodes twice: with samples, and each as one sample.
func splitAndJoined() (split, joined []*traj.Trajectory) {
	for _, joinedFlag := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(9, 9))
		var ts []*traj.Trajectory
		for g := range 3 {
			for i := range 4 {
				var at []int
				switch i {
				case 1:
					at = []int{0}
				case 2:
					at = []int{0, 1}
				}
				ts = append(ts, episodeTraj(rng, "e", uint64(g), 3, at, joinedFlag))
			}
		}
		if joinedFlag {
			joined = ts
		} else {
			split = ts
		}
	}
	return split, joined
}

func TestFromTrajectoriesSamples(t *testing.T) {
	split, joined := splitAndJoined()
	b, err := FromTrajectories(split)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, tr := range split {
		want += tr.NumSamples()
	}
	if b.NumSeqs() != want || b.NumEpisodes() != len(split) || want == len(split) {
		t.Fatalf("%d sequences, %d episodes; want %d samples of %d episodes", b.NumSeqs(), b.NumEpisodes(), want, len(split))
	}
	// Every sequence is one sample, tokens and turns in the sample's own positions.
	i := 0
	for e, tr := range split {
		for k := range tr.NumSamples() {
			lo, hi := tr.Sample(k)
			s0, s1 := b.Seq(i)
			if b.Episodes[i] != e || !slices.Equal(b.Tokens[s0:s1], tr.Tokens[lo:hi]) {
				t.Fatalf("sequence %d is not sample %d of episode %d", i, k, e)
			}
			for _, tu := range b.SeqTurns(i) {
				if tu.Start < 0 || tu.End > hi-lo || !slices.Equal(b.Mask[s0+tu.Start:s0+tu.End], []bool{true, true, true}) {
					t.Fatalf("sequence %d: turn %+v is not its completion", i, tu)
				}
			}
			i++
		}
	}
	// One sample per trajectory: no Episodes, as before.
	b1, err := FromTrajectories(joined)
	if err != nil || b1.Episodes != nil || b1.NumSeqs() != len(joined) {
		t.Fatalf("one-sample batch: episodes %v, %d sequences (err %v)", b1.Episodes, b1.NumSeqs(), err)
	}
}

// TestEstimateEpisodes: an episode split into samples gets the advantages it would get whole,
// for every estimator that does not key on the observation text (GiGPO's anchors are the
// observations, which a re-rendered context changes): group statistics count episodes.
func TestEstimateEpisodes(t *testing.T) {
	split, joined := splitAndJoined()
	for _, name := range []string{"grpo", "rloo", "reinforce-baseline", "reinforce++", "reinforce++-baseline", "gae", "gae-turn", "turn-return"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := DefaultAdvantageConfig(name)
			if err != nil {
				t.Fatal(err)
			}
			est, err := NewEstimator(cfg)
			if err != nil {
				t.Fatal(err)
			}
			run := func(ts []*traj.Trajectory) *Batch {
				b, err := FromTrajectories(ts)
				if err != nil {
					t.Fatal(err)
				}
				if NeedsValues(est) {
					b.Values = make([]float32, b.NumTokens())
					for i := range b.Values {
						if b.Mask[i] {
							b.Values[i] = float32(i%7) * 0.1
						}
					}
				}
				if _, err := EstimateEpisodes(est, b); err != nil {
					t.Fatal(err)
				}
				return b
			}
			a, w := run(split), run(joined)
			if !slices.Equal(a.Advantages, w.Advantages) || !slices.Equal(a.Returns, w.Returns) {
				t.Fatalf("split episodes' advantages differ from whole ones':\n got %v\nwant %v", a.Advantages, w.Advantages)
			}
			nz := 0
			for _, v := range a.Advantages {
				nz += b2i(v != 0)
			}
			if nz == 0 {
				t.Fatal("every advantage is 0: the test compares nothing")
			}
			// Estimating the samples as if each were an episode differs: the check has teeth.
			b, _ := FromTrajectories(split)
			b.Episodes = nil
			if NeedsValues(est) {
				b.Values = a.Values
			}
			if _, err := est.Estimate(b); err == nil && slices.Equal(b.Advantages, w.Advantages) {
				t.Fatal("treating samples as episodes gives the same advantages")
			}
		})
	}
}

func TestMinibatchesKeepEpisodes(t *testing.T) {
	split, _ := splitAndJoined()
	b, err := FromTrajectories(split)
	if err != nil {
		t.Fatal(err)
	}
	mbs, err := b.Minibatches(4, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	total := 0
	for k, idx := range mbs {
		for _, i := range idx {
			if m, ok := seen[b.Episodes[i]]; ok && m != k {
				t.Fatalf("episode %d is split over minibatches %d and %d", b.Episodes[i], m, k)
			}
			seen[b.Episodes[i]] = k
			total++
		}
		mb, err := b.Select(idx)
		if err != nil || mb.Validate() != nil || mb.NumEpisodes() != len(split)/4 {
			t.Fatalf("minibatch %d: %d episodes (err %v)", k, mb.NumEpisodes(), err)
		}
	}
	if total != b.NumSeqs() {
		t.Fatalf("minibatches hold %d of %d sequences", total, b.NumSeqs())
	}
	if _, err := b.Minibatches(len(split)+1, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Fatal("more minibatches than episodes accepted")
	}
}

func TestAggregateSamples(t *testing.T) {
	split, _ := splitAndJoined()
	b, err := FromTrajectories(split[:3]) // samples: 1, 2, 3 (3 tokens each)
	if err != nil {
		t.Fatal(err)
	}
	include := []bool{true, true, true, true, true, true}
	coef := make([]float64, b.NumSeqs())
	tok, n := aggregate(coef, b, include, AggSeqMeanTokenMean, 0, "")
	// Episodes of 9, 9 and 9 masked tokens; each episode weighs 1/3, each token 1/27.
	if tok != 27 || n != 3 {
		t.Fatalf("tokens %d, episodes %d", tok, n)
	}
	for i, c := range coef {
		if math.Abs(c-1.0/27) > 1e-15 {
			t.Fatalf("episode mode: coef[%d] = %v, want 1/27", i, c)
		}
	}
	_, n = aggregate(coef, b, include, AggSeqMeanTokenMean, 0, AggSamplesSample)
	// Six samples: the one-sample episode's tokens weigh 1/(6·9), the others' 1/(6·3).
	if n != 6 || math.Abs(coef[0]-1.0/54) > 1e-15 || math.Abs(coef[1]-1.0/18) > 1e-15 {
		t.Fatalf("sample mode: %d sequences, coef %v", n, coef)
	}
	aggregate(coef, b, include, AggTokenMean, 0, "")
	for i, c := range coef {
		if c != 1.0/27 {
			t.Fatalf("token-mean: coef[%d] = %v, want 1/27", i, c)
		}
	}
	for _, c := range []struct {
		agg, samples string
		ok           bool
	}{
		{AggSeqMeanTokenMean, AggSamplesSample, true}, {AggDrGRPO, AggSamplesEpisode, true},
		{AggTokenMean, AggSamplesSample, false}, {AggSeqMeanTokenMean, "each", false},
	} {
		cfg := DefaultLossConfig()
		cfg.Agg, cfg.AggSamples = c.agg, c.samples
		if c.agg == AggDrGRPO {
			cfg.AggNorm = 64
		}
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("agg %s agg_samples %s: err %v", c.agg, c.samples, err)
		}
	}
}

func TestValidateEpisodes(t *testing.T) {
	split, _ := splitAndJoined()
	for name, mutate := range map[string]func(*Batch){
		"not contiguous": func(b *Batch) { b.Episodes[2], b.Episodes[1] = b.Episodes[1], b.Episodes[2]+1 },
		"reward differs": func(b *Batch) { b.Rewards[2] += 1 },
		"short":          func(b *Batch) { b.Episodes = b.Episodes[1:] },
	} {
		b, err := FromTrajectories(split)
		if err != nil {
			t.Fatal(err)
		}
		mutate(b)
		if b.Validate() == nil {
			t.Errorf("%s: Validate accepted episodes %v", name, b.Episodes)
		}
	}
}
