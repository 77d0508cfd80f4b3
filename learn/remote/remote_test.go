package remote

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/traj"
)

var tinyConfig = model.Config{Vocab: 32, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 64,
	RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}

func tinyModel(t testing.TB, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(tinyConfig, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var optimConfig = learn.Config{ScheduleConfig: optim.ScheduleConfig{LR: 1e-2, MinLRRatio: 1},
	Config: optim.Config{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.01}, GradClip: 1}

func newLearner(t testing.TB, m *model.Model) *learn.Learner {
	t.Helper()
	l, err := learn.New(m, optimConfig, 1000, 32)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// episode builds a trajectory: prompt tokens (user), then an assistant answer.
func episode(id string, group uint64, prompt, answer []int32, rew float64) *traj.Trajectory {
	t := &traj.Trajectory{ID: id, GroupID: group, Reward: rew}
	for _, x := range prompt {
		t.Tokens = append(t.Tokens, x)
		t.Roles = append(t.Roles, traj.RoleUser)
		t.LossMask = append(t.LossMask, false)
		t.Logprobs = append(t.Logprobs, 0)
		t.Versions = append(t.Versions, traj.NoVersion)
	}
	start := len(t.Tokens)
	for i, x := range answer {
		t.Tokens = append(t.Tokens, x)
		t.Roles = append(t.Roles, traj.RoleAssistant)
		t.LossMask = append(t.LossMask, true)
		t.Logprobs = append(t.Logprobs, -3.4+0.1*float32(i))
		t.Versions = append(t.Versions, 0)
	}
	t.Turns = []traj.Turn{{Start: start, End: len(t.Tokens), ObsEnd: len(t.Tokens)}}
	return t
}

func episodes() []*traj.Trajectory {
	prompt := []int32{1, 2, 3}
	return []*traj.Trajectory{
		episode("a", 7, prompt, []int32{4, 5, 9}, 1), episode("b", 7, prompt, []int32{6, 7}, 0),
		episode("c", 8, []int32{2, 9}, []int32{4, 6, 11, 12}, 1), episode("d", 8, []int32{2, 9}, []int32{5, 7}, 0),
	}
}

// serve serves a Builtin backend over m (whose optimizer is opt) on loopback.
func serve(t testing.TB, m *model.Model, opt *optim.AdamW, key string) (*Server, *httptest.Server) {
	t.Helper()
	b := &learn.Builtin{Model: m, Opt: opt, RowLen: 32}
	s, err := NewServer(b, key, m.Cfg.Vocab, opt.Steps(), Info{Params: int64(m.NumParams()), ValueHead: m.HasValueHead(), Device: "cpu", DType: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs
}

func rlUpdate(t testing.TB, l *learn.Learner, lossCfg algo.LossConfig) *learn.RL {
	t.Helper()
	est, err := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	if err != nil {
		t.Fatal(err)
	}
	loss, err := algo.NewLoss(lossCfg)
	if err != nil {
		t.Fatal(err)
	}
	return &learn.RL{Learner: l, Estimator: est, Loss: loss, Epochs: 2, Minibatches: 2}
}

// An RL step through the HTTP contract gives the in-process step's weights and report bit for
// bit: float32 crosses the wire exactly and the server computes with the same backend.
func TestHTTPStepMatchesInProcess(t *testing.T) {
	local := tinyModel(t, 3)
	far := local.Clone()
	ll := newLearner(t, local)
	rl := newLearner(t, far.Clone()) // the client-side model is not trained: the server's is
	_, hs := serve(t, far, rl.Opt, "k3y")
	c, err := Dial(context.Background(), Options{URL: hs.URL, Key: "k3y", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rl.Backend = c
	lossCfg := algo.DefaultLossConfig()
	lu, ru := rlUpdate(t, ll, lossCfg), rlUpdate(t, rl, lossCfg)
	for step := range 3 {
		ll.Step, rl.Step = step, step
		a, err := lu.Step(episodes(), int32(step), rand.New(rand.NewPCG(5, uint64(step))))
		if err != nil {
			t.Fatal(err)
		}
		b, err := ru.Step(episodes(), int32(step), rand.New(rand.NewPCG(5, uint64(step))))
		if err != nil {
			t.Fatal(err)
		}
		if a.Loss != b.Loss || a.GradNorm != b.GradNorm || a.Updates != b.Updates || a.Entropy != b.Entropy || a.Shift != b.Shift {
			t.Fatalf("step %d: in-process %+v, over HTTP %+v", step, a.RLStats, b.RLStats)
		}
	}
	if !slices.Equal(local.Params.Data, far.Params.Data) {
		t.Fatal("weights trained over HTTP differ from the in-process ones")
	}
	if c.OptimizerSteps() != 12 {
		t.Fatalf("client counts %d updates, want 12", c.OptimizerSteps())
	}
}

func TestDialRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:1", "127.0.0.1:1", "http://10.1.2.3:9000", "http://127.0.0.1:1/x"} {
		if _, err := Dial(context.Background(), Options{URL: u}); err == nil {
			t.Fatalf("Dial(%q) accepted", u)
		}
	}
}

func oneSeq() *learn.Seqs {
	return &learn.Seqs{Tokens: []int32{1, 2, 3, 4}, Offsets: []int{0, 4}, Mask: []bool{false, false, true, true}}
}

// A learner that stops answering fails the call at its deadline, naming the learner.
func TestSilentLearnerFailsAtDeadline(t *testing.T) {
	m := tinyModel(t, 1)
	opt, _ := optim.NewAdamW(optimConfig.Config, m.NumParams(), nil)
	s, _ := serve(t, m, opt, "")
	var silent atomic.Bool
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if silent.Load() {
			<-release
			return
		}
		s.ServeHTTP(w, r)
	}))
	defer hs.Close()
	defer close(release)
	c, err := Dial(context.Background(), Options{URL: hs.URL, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	silent.Store(true)
	out := learn.Outputs{Logprobs: make([]float32, 4)}
	t0 := time.Now()
	err = c.Forward(context.Background(), oneSeq(), learn.ForwardOptions{}, &out)
	if !errors.Is(err, learn.ErrLearner) || !strings.Contains(err.Error(), "did not answer /v1/forward within 200ms") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("the call took %v", d)
	}
}

// A learner killed mid-step (its connection cut while it computes) fails the call; a learner
// that comes back with a new epoch is refused until recovered from a saved state, and nothing
// is applied twice.
func TestKilledAndRestartedLearner(t *testing.T) {
	ctx := context.Background()
	m := tinyModel(t, 2)
	opt, _ := optim.NewAdamW(optimConfig.Config, m.NumParams(), nil)
	s1, _ := serve(t, m, opt, "")
	var kill atomic.Bool
	var current atomic.Pointer[Server]
	current.Store(s1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kill.Load() && r.URL.Path == "/v1/forward_backward" {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the process died mid-step
			}
			return
		}
		current.Load().ServeHTTP(w, r)
	}))
	defer hs.Close()
	c, err := Dial(ctx, Options{URL: hs.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := oneSeq()
	co := learn.Coefficients{DLogprobs: []float32{0, 0, -0.5, -0.5}}
	if err := c.ForwardBackward(ctx, s, co); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2, GradClip: 1}); err != nil {
		t.Fatal(err)
	}
	saved := m.Clone()
	savedOpt := opt.State()

	kill.Store(true)
	if err := c.ForwardBackward(ctx, s, co); !errors.Is(err, learn.ErrLearner) {
		t.Fatalf("killed mid-step: err = %v", err)
	}
	kill.Store(false)

	// The learner restarts from an older state: a fresh model and optimizer (update count 0).
	m2 := tinyModel(t, 2)
	opt2, _ := optim.NewAdamW(optimConfig.Config, m2.NumParams(), nil)
	b2 := &learn.Builtin{Model: m2, Opt: opt2, RowLen: 32,
		Load: func(string, *model.Model, *optim.AdamW) error {
			if err := m2.CopyWeightsFrom(saved); err != nil {
				return err
			}
			return opt2.LoadState(savedOpt)
		}}
	s2, err := NewServer(b2, "", m2.Cfg.Vocab, 0, Info{})
	if err != nil {
		t.Fatal(err)
	}
	current.Store(s2)
	if err := c.ForwardBackward(ctx, s, co); !errors.Is(err, ErrRestarted) {
		t.Fatalf("restarted learner: err = %v", err)
	}
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2}); !errors.Is(err, ErrRestarted) {
		t.Fatalf("restarted learner, optim_step: err = %v", err)
	}
	if opt2.Steps() != 0 {
		t.Fatal("the restarted learner applied an update")
	}
	// A state at another update count than the run's is refused by Recover.
	if err := c.Recover(ctx, "state", 2); !errors.Is(err, ErrSteps) {
		t.Fatalf("Recover to the wrong count: err = %v", err)
	}
	if err := c.Recover(ctx, "state", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ForwardBackward(ctx, s, co); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2, GradClip: 1}); err != nil {
		t.Fatal(err)
	}
	if opt2.Steps() != 2 || c.OptimizerSteps() != 2 {
		t.Fatalf("after recovery: learner at %d updates, client at %d", opt2.Steps(), c.OptimizerSteps())
	}
}

// A retried optimizer step whose first try was applied is refused: nothing trains twice.
func TestOptimStepAppliedOnce(t *testing.T) {
	ctx := context.Background()
	m := tinyModel(t, 4)
	opt, _ := optim.NewAdamW(optimConfig.Config, m.NumParams(), nil)
	_, hs := serve(t, m, opt, "")
	c, err := Dial(ctx, Options{URL: hs.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2}); err != nil {
		t.Fatal(err)
	}
	c.steps-- // as if the answer had been lost and the client retried
	if _, err := c.OptimStep(ctx, learn.OptimStep{LR: 1e-2}); !errors.Is(err, ErrSteps) {
		t.Fatalf("retried step: err = %v", err)
	}
	if opt.Steps() != 1 {
		t.Fatalf("optimizer at %d updates, want 1", opt.Steps())
	}
}

func TestKeyRequired(t *testing.T) {
	m := tinyModel(t, 1)
	opt, _ := optim.NewAdamW(optimConfig.Config, m.NumParams(), nil)
	_, hs := serve(t, m, opt, "secret")
	if _, err := Dial(context.Background(), Options{URL: hs.URL, Key: "wrong"}); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("wrong key: err = %v", err)
	}
}

// A learner that listens but never accepts the request body still fails at the deadline.
func TestUnresponsiveListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // never answers
		}
	}()
	_, err = Dial(context.Background(), Options{URL: "http://" + ln.Addr().String(), Timeout: 150 * time.Millisecond})
	if !errors.Is(err, learn.ErrLearner) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("err = %v", err)
	}
}

// serveHTTP serves h on loopback for the test and returns its URL.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}
