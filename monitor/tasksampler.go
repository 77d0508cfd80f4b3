package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
)

// taskSampler is difficulty-aware task sampling (monitor.task_sampling; config.TaskSamplingConfig
// says what it does). It remembers each observed task's decayed success count and draws tasks
// whose recent success is neither 0 nor 1, with a share of fresh draws.
//
// A loop uses it through two calls: next (or draw, n at a time) for the task of each group it
// starts, and observe for groups that have finished. Draws read only the random stream given and
// the sampler's state, and change the state only by marking the task drawn, so a sequence of
// calls made in the same order with the same streams makes the same draws. The loops of
// pipeline draw a step's tasks as they sample it (Actions.DrawTasks) and observe the step's
// groups, in the order they were sampled, when the step is logged (Actions.Act, from the step's
// Stats.groups); an asynchronous controller that admits one group at a time calls next per group
// (Actions.DrawTask).
// A remembered task drawn and never observed (a distributed group none of whose episodes came
// back) stays out of the draws from the remembered tasks until the phase ends. Safe for
// concurrent use.
type taskSampler struct {
	cfg  config.TaskSamplingConfig
	reg  *env.Registry
	envs []config.EnvWeight // the phase's mix, for fresh draws

	mu    sync.Mutex
	known []taskStat                    // remembered tasks, in the order first observed
	index map[taskKey]int               // position in known
	drawn map[taskKey]int               // remembered tasks drawn and not yet observed: not drawn again
	clock int64                         // groups observed so far
	over  bool                          // the last observed step's zero-variance share was above the limit
	count struct{ fresh, replayed int } // draws since the last takeCounts
}

type taskKey struct {
	env  string
	seed int64
}

// taskStat is one remembered task: its decayed successes and episodes, and the observation
// counter when it was last observed (the least recently observed is forgotten first).
type taskStat struct {
	Env  string  `json:"env"`
	Seed int64   `json:"seed"`
	Succ float64 `json:"succ"`
	N    float64 `json:"n"`
	Seen int64   `json:"seen"`
}

// learnability is p̂(1−p̂) of the task's success estimate p̂.
func (t *taskStat) learnability() float64 {
	if t.N <= 0 {
		return 0
	}
	p := t.Succ / t.N
	return p * (1 - p)
}

// taskSamplerState is what a checkpoint keeps of a sampler. Draws not yet observed are not kept:
// a resumed run draws them again.
type taskSamplerState struct {
	Tasks      []taskStat `json:"tasks"`
	Clock      int64      `json:"clock"`
	Oversample bool       `json:"oversample,omitempty"`
}

// groupOutcome is how one group of a step ended: its task and its episodes that did not fail
// (an environment error says nothing about the task), of which succ succeeded.
type groupOutcome struct {
	env     string
	seed    int64
	n, succ int
}

func newTaskSampler(cfg config.TaskSamplingConfig, reg *env.Registry, envs []config.EnvWeight) *taskSampler {
	return &taskSampler{cfg: cfg, reg: reg, envs: envs, index: map[taskKey]int{}, drawn: map[taskKey]int{}}
}

// next draws the task of one group, with group id groupID.
func (s *taskSampler) next(rng *rand.Rand, groupID uint64) (rollout.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextLocked(rng, groupID)
}

// draw draws n tasks with group ids groupBase, groupBase+1, ….
func (s *taskSampler) draw(rng *rand.Rand, n int, groupBase uint64) ([]rollout.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]rollout.Task, n)
	for i := range out {
		t, err := s.nextLocked(rng, groupBase+uint64(i))
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

func (s *taskSampler) nextLocked(rng *rand.Rand, groupID uint64) (rollout.Task, error) {
	if rng.Float64() >= s.cfg.Explore {
		if i, ok := s.pick(rng); ok {
			k := &s.known[i]
			s.drawn[taskKey{k.Env, k.Seed}]++
			s.count.replayed++
			return rollout.Task{Env: k.Env, Seed: k.Seed, GroupID: groupID}, nil
		}
	}
	ts, err := SampleTasks(s.reg, rng, s.envs, 1, groupID)
	if err != nil {
		return rollout.Task{}, err
	}
	t := ts[0]
	if _, ok := s.index[taskKey{t.Env, t.Seed}]; ok {
		s.drawn[taskKey{t.Env, t.Seed}]++
	}
	s.count.fresh++
	return t, nil
}

// pick chooses a remembered task not drawn since it was last observed, with probability
// proportional to its learnability; false when none is learnable.
func (s *taskSampler) pick(rng *rand.Rand) (int, bool) {
	var total float64
	for i := range s.known {
		if s.drawn[taskKey{s.known[i].Env, s.known[i].Seed}] == 0 {
			total += s.known[i].learnability()
		}
	}
	if total <= 0 {
		return 0, false
	}
	u := rng.Float64() * total
	last := -1
	for i := range s.known {
		if s.drawn[taskKey{s.known[i].Env, s.known[i].Seed}] != 0 {
			continue
		}
		w := s.known[i].learnability()
		if w <= 0 {
			continue
		}
		last = i
		if u < w {
			return i, true
		}
		u -= w
	}
	return last, true // rounding left u at the end
}

// groups is how many groups a round of dynamic sampling that misses n asks for: n, or
// n·oversample after a step with too many zero-variance groups (at most MaxGroupsPerStep).
func (s *taskSampler) groups(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.over || s.cfg.Oversample <= 1 {
		return n
	}
	return min(int(math.Ceil(float64(n)*s.cfg.Oversample)), config.MaxGroupsPerStep)
}

// observe takes a step's finished groups, in the order they were sampled, and the step's share of
// zero-variance groups against the monitor's limit. It returns the actions taken: oversampling
// switched on or off.
func (s *taskSampler) observe(groups []groupOutcome, zeroVarShare, limit float64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range groups {
		key := taskKey{g.env, g.seed}
		if c := s.drawn[key]; c > 1 {
			s.drawn[key] = c - 1
		} else {
			delete(s.drawn, key)
		}
		if g.n == 0 {
			continue
		}
		s.clock++
		i, ok := s.index[key]
		if !ok {
			if len(s.known) >= s.cfg.MaxTasks {
				s.forget()
			}
			i = len(s.known)
			s.known = append(s.known, taskStat{Env: g.env, Seed: g.seed})
			s.index[key] = i
		}
		t := &s.known[i]
		t.Succ = s.cfg.Decay*t.Succ + float64(g.succ)
		t.N = s.cfg.Decay*t.N + float64(g.n)
		t.Seen = s.clock
	}
	if s.cfg.Oversample <= 1 || len(groups) == 0 {
		return nil
	}
	over := zeroVarShare > limit
	if over == s.over {
		return nil
	}
	s.over = over
	if over {
		return []string{fmt.Sprintf("learning signal: %.0f%% of the step's groups had zero reward variance (limit %.0f%%): dynamic sampling asks for ×%g the groups it misses",
			100*zeroVarShare, 100*limit, s.cfg.Oversample)}
	}
	return []string{fmt.Sprintf("learning signal: %.0f%% of the step's groups had zero reward variance (limit %.0f%%): dynamic sampling back to ×1",
		100*zeroVarShare, 100*limit)}
}

// forget drops the least recently observed task.
func (s *taskSampler) forget() {
	old := 0
	for i := range s.known {
		if s.known[i].Seen < s.known[old].Seen {
			old = i
		}
	}
	delete(s.index, taskKey{s.known[old].Env, s.known[old].Seed})
	s.known = append(s.known[:old], s.known[old+1:]...)
	for i := old; i < len(s.known); i++ {
		s.index[taskKey{s.known[i].Env, s.known[i].Seed}] = i
	}
}

// samplerStats are the sampler's figures for a step's metrics line.
type samplerStats struct {
	fresh, replayed  int // draws since the last call
	known, learnable int
	oversample       float64 // the factor the step's rounds asked for
}

// takeCounts returns the sampler's figures and starts counting draws afresh.
func (s *taskSampler) takeCounts() samplerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := samplerStats{fresh: s.count.fresh, replayed: s.count.replayed, known: len(s.known), oversample: 1}
	for i := range s.known {
		if s.known[i].learnability() > 0 {
			st.learnable++
		}
	}
	if s.over && s.cfg.Oversample > 1 {
		st.oversample = s.cfg.Oversample
	}
	s.count.fresh, s.count.replayed = 0, 0
	return st
}

func (s *taskSampler) state() *taskSamplerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &taskSamplerState{Tasks: append([]taskStat{}, s.known...), Clock: s.clock, Oversample: s.over}
}

func (s *taskSampler) restore(st *taskSamplerState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(st.Tasks) > s.cfg.MaxTasks {
		return fmt.Errorf("the checkpoint's task sampler remembers %d tasks, more than monitor.task_sampling.max_tasks %d", len(st.Tasks), s.cfg.MaxTasks)
	}
	s.known = append([]taskStat{}, st.Tasks...)
	s.index = map[taskKey]int{}
	for i, t := range s.known {
		s.index[taskKey{t.Env, t.Seed}] = i
	}
	s.drawn = map[taskKey]int{}
	s.clock, s.over = st.Clock, st.Oversample
	return nil
}
