package envtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime/debug"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// panicError is what a recovered panic becomes, so a panicking env fails one check instead of
// the whole test binary.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", p.value, p.stack) }

func isPanic(err error) bool {
	var p *panicError
	return errors.As(err, &p)
}

func recovered(err *error) {
	if p := recover(); p != nil {
		*err = &panicError{value: p, stack: debug.Stack()}
	}
}

func safeReset(ctx context.Context, e env.Env, seed int64) (obs env.Observation, err error) {
	defer recovered(&err)
	return e.Reset(ctx, seed)
}

func safeStep(ctx context.Context, e env.Env, action string) (tr env.Transition, err error) {
	defer recovered(&err)
	return e.Step(ctx, action)
}

func safePlay(ctx context.Context, e env.Env, a env.Agent, seed int64, maxSteps int) (ep env.Episode, err error) {
	defer recovered(&err)
	return env.Play(ctx, e, a, seed, maxSteps)
}

// checkTransition reports what is wrong with one transition, or "" when it is valid.
func checkTransition(tr env.Transition) string {
	switch {
	case tr.Role != traj.RoleTool && tr.Role != traj.RoleEnv:
		return fmt.Sprintf("role %v: observations are spoken by tool or env", tr.Role)
	case math.IsNaN(tr.Reward) || math.IsInf(tr.Reward, 0):
		return fmt.Sprintf("reward %v is not finite", tr.Reward)
	}
	if v, ok := tr.Info[env.InfoSuccess]; ok && v != "true" && v != "false" {
		return fmt.Sprintf("info %s=%q: want true or false", env.InfoSuccess, v)
	}
	return ""
}

func (s *suite) testSpec(t *testing.T) {
	sp := s.spec
	if sp.Name == "" || sp.New == nil || sp.Expert == nil || sp.Corpus == nil {
		t.Fatalf("incomplete spec %+v", sp)
	}
	if sp.Train.Len() <= 0 || sp.Heldout.Len() <= 0 {
		t.Errorf("empty seed range: train %v held-out %v", sp.Train, sp.Heldout)
	}
	if sp.Train.Lo < sp.Heldout.Hi && sp.Heldout.Lo < sp.Train.Hi {
		t.Errorf("train %v and held-out %v seed ranges overlap", sp.Train, sp.Heldout)
	}
	if (len(sp.Levels) == 0) != (sp.AtLevel == nil) {
		t.Errorf("levels %v given without AtLevel, or AtLevel without levels", sp.Levels)
	}
	for i, l := range sp.Levels {
		if l < 1 || l > env.MaxLevel || (i > 0 && l <= sp.Levels[i-1]) {
			t.Errorf("levels %v must be ascending in [1, %d]", sp.Levels, env.MaxLevel)
			break
		}
		at := sp.AtLevel(l)
		if at.Name != sp.Name || at.Train != sp.Train || at.Heldout != sp.Heldout {
			t.Errorf("level %d: name %q, seeds %v %v, want those of %s", l, at.Name, at.Train, at.Heldout, sp.Name)
		}
	}
	if got := sp.Corpus(0); len(got) != 0 {
		t.Errorf("Corpus(0) returned %d samples", len(got))
	}
	a, b := sp.Corpus(20), sp.Corpus(20)
	if len(a) != 20 {
		t.Fatalf("Corpus(20) returned %d samples", len(a))
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Corpus(20) differs between calls: a tokenizer trained on it would not reproduce")
	}
	distinct := map[string]bool{}
	for i, x := range a {
		if x == "" {
			t.Errorf("Corpus sample %d is empty", i)
		}
		distinct[x] = true
	}
	if len(distinct) < 2 {
		t.Errorf("Corpus(20) has %d distinct samples: not varied", len(distinct))
	}
}

func (s *suite) testSeedRanges(t *testing.T) {
	ctx := context.Background()
	e := s.newEnv(t)
	for _, r := range []struct {
		name string
		rng  env.SeedRange
	}{{"train", s.spec.Train}, {"heldout", s.spec.Heldout}} {
		texts := map[string]bool{}
		for _, seed := range sampleSeeds(r.rng, 8) {
			obs, err := safeReset(ctx, e, seed)
			if err != nil {
				t.Errorf("%s seed %d: Reset: %v", r.name, seed, err)
				continue
			}
			if obs.Text == "" {
				t.Errorf("%s seed %d: empty task text", r.name, seed)
			}
			texts[obs.System+"\x00"+obs.Text] = true
		}
		if len(texts) < 2 {
			t.Errorf("%s range: 8 seeds gave %d distinct tasks", r.name, len(texts))
		}
	}
}

// sameEpisode compares everything an episode shows the learner; Info is diagnostics and may hold
// timings, so it is left out.
func sameEpisode(a, b env.Episode) string {
	if a.Start != b.Start {
		return fmt.Sprintf("Reset differs: %q vs %q", a.Start, b.Start)
	}
	if len(a.Steps) != len(b.Steps) {
		return fmt.Sprintf("%d steps vs %d", len(a.Steps), len(b.Steps))
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		x.Transition.Info, y.Transition.Info = nil, nil
		if !reflect.DeepEqual(x, y) {
			return fmt.Sprintf("step %d differs:\n%+v\n%+v", i, x, y)
		}
	}
	if a.Done != b.Done || a.Reward != b.Reward || a.Success != b.Success {
		return fmt.Sprintf("outcome differs: done %v/%v reward %v/%v success %v/%v", a.Done, b.Done, a.Reward, b.Reward, a.Success, b.Success)
	}
	return ""
}

func (s *suite) testDeterminism(t *testing.T) {
	ctx := context.Background()
	e1, e2 := s.newEnv(t), s.newEnv(t)
	seeds := append(sampleSeeds(s.spec.Train, 3), sampleSeeds(s.spec.Heldout, 3)...)
	play := func(e env.Env, seed int64) env.Episode {
		ep, err := safePlay(ctx, e, s.spec.Expert(seed, NoisyNoise, expertRNG(seed)), seed, s.opts.MaxSteps)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return ep
	}
	first := make([]env.Episode, len(seeds))
	for i, seed := range seeds {
		first[i] = play(e1, seed)
		if diff := sameEpisode(first[i], play(e2, seed)); diff != "" {
			t.Errorf("seed %d on two fresh instances: %s", seed, diff)
		}
	}
	// Replaying on a used instance, in reverse order, must not depend on what it did before.
	for i := len(seeds) - 1; i >= 0; i-- {
		if diff := sameEpisode(first[i], play(e1, seeds[i])); diff != "" {
			t.Errorf("seed %d replayed on a used instance: %s", seeds[i], diff)
		}
	}
}

func (s *suite) testContract(t *testing.T) {
	ctx := context.Background()
	fresh := s.newEnv(t)
	if _, err := safeStep(ctx, fresh, "hello"); err == nil || isPanic(err) {
		t.Errorf("Step before Reset: got error %v, want an ordinary error", err)
	}
	e := s.newEnv(t)
	for _, seed := range sampleSeeds(s.spec.Train, 6) {
		for _, noise := range []float64{0, NoisyNoise, 1} {
			ep, err := safePlay(ctx, e, s.spec.Expert(seed, noise, expertRNG(seed)), seed, s.opts.MaxSteps)
			if err != nil {
				t.Errorf("seed %d noise %v: %v", seed, noise, err)
				continue
			}
			if !ep.Done {
				t.Errorf("seed %d noise %v: episode did not end within %d steps", seed, noise, s.opts.MaxSteps)
				continue
			}
			for i, st := range ep.Steps {
				if msg := checkTransition(st.Transition); msg != "" {
					t.Errorf("seed %d noise %v step %d: %s", seed, noise, i, msg)
				}
			}
			if _, ok := ep.Steps[len(ep.Steps)-1].Transition.Info[env.InfoSuccess]; !ok {
				t.Errorf("seed %d noise %v: final transition lacks Info[%q]", seed, noise, env.InfoSuccess)
			}
			for _, action := range []string{"again", ""} {
				if _, err := safeStep(ctx, e, action); err == nil || isPanic(err) {
					t.Errorf("seed %d: Step after Done: got error %v, want an ordinary error", seed, err)
				}
			}
		}
	}
}

func (s *suite) testExpert(t *testing.T) {
	ctx := context.Background()
	e := s.newEnv(t)
	seeds := sampleSeeds(s.spec.Heldout, s.opts.Samples)
	rate := func(noise float64) float64 {
		wins := 0
		for _, seed := range seeds {
			ep, err := safePlay(ctx, e, s.spec.Expert(seed, noise, expertRNG(seed)), seed, s.opts.MaxSteps)
			if err != nil {
				t.Fatalf("seed %d noise %v: %v", seed, noise, err)
			}
			if ep.Success {
				wins++
			}
		}
		return float64(wins) / float64(len(seeds))
	}
	clean, noisy := rate(0), rate(NoisyNoise)
	t.Logf("held-out success over %d seeds: noise 0 %.2f, noise %v %.2f", len(seeds), clean, NoisyNoise, noisy)
	if clean < s.opts.MinExpertSuccess {
		t.Errorf("expert at noise 0 solved %.2f of held-out tasks, want at least %.2f", clean, s.opts.MinExpertSuccess)
	}
	if noisy >= clean {
		t.Errorf("expert at noise %v solved %.2f, not fewer than at noise 0 (%.2f): noise does not make it err", NoisyNoise, noisy, clean)
	}
}
