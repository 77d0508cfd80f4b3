package pipeline

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/learn/remote"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/tokenizer"
)

// goLearner is a learner process's side in one test: the built-in backend, made when the run
// first loads a state folder into it, behind learn/remote's server.
type goLearner struct {
	b   *learn.Builtin
	cfg learn.Config
	run string // the run directory, whose tokenizer the folders it writes carry
}

func (g *goLearner) Forward(ctx context.Context, s *learn.Seqs, o learn.ForwardOptions, out *learn.Outputs) error {
	return g.b.Forward(ctx, s, o, out)
}
func (g *goLearner) ForwardBackward(ctx context.Context, s *learn.Seqs, c learn.Coefficients) error {
	return g.b.ForwardBackward(ctx, s, c)
}
func (g *goLearner) OptimStep(ctx context.Context, o learn.OptimStep) (learn.Update, error) {
	return g.b.OptimStep(ctx, o)
}
func (g *goLearner) SaveForSampler(ctx context.Context, v int32) (learn.Artifact, error) {
	return learn.Artifact{Version: v}, nil
}
func (g *goLearner) OptimizerSteps() int64 { return g.b.Opt.Steps() }

func (g *goLearner) save(dir string, state bool) (int64, error) {
	tok, err := tokenizer.Load(filepath.Join(g.run, "tokenizer"))
	if err != nil {
		return 0, err
	}
	var st *checkpoint.State
	if state {
		o := g.b.Opt.State()
		st = &checkpoint.State{Optimizer: &o}
	}
	return 0, checkpoint.Save(dir, g.b.Model, tok, st)
}

func (g *goLearner) SaveState(_ context.Context, dir string) error {
	_, err := g.save(dir, true)
	return err
}

func (g *goLearner) LoadState(_ context.Context, dir string) error {
	m, err := checkpoint.LoadModel(dir)
	if err != nil {
		return err
	}
	opt, err := optim.NewAdamW(g.cfg.Config, m.NumParams(), learn.DecaySegments(&m.Params))
	if err != nil {
		return err
	}
	if err := loadTensors(m, opt, dir, true); err != nil {
		return err
	}
	g.b = &learn.Builtin{Model: m, Opt: opt, RowLen: 320}
	return nil
}

// A run whose RL phase trains through the learner protocol (backend http, to a learner serving
// the built-in model) logs the same metrics, evaluations included, as the same run in-process,
// bit for bit: the contract, the weights' round trips through files and the checkpoints' state
// fetch change nothing. Each sync's probe finds no difference.
func TestRunThroughHTTPLearner(t *testing.T) {
	sets := []string{"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05"}
	base := tinyConfig(t, t.TempDir(), sets...)
	run, err := NewRun(base, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := metricLines(t, run.Dir)

	cfg := tinyConfig(t, t.TempDir(), sets...)
	g := &goLearner{cfg: cfg.Phases[1].Optim}
	srv, err := remote.NewServer(g, "", 0, 0, remote.Info{})
	if err != nil {
		t.Fatal(err)
	}
	srv.SaveWeights = func(dir string, _ int32) (int64, error) { return g.save(dir, false) }
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg.Learner = learn.BackendConfig{Backend: learn.BackendHTTP, URL: hs.URL}
	run2, err := NewRun(cfg, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	g.run = run2.Dir
	if _, err := run2.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := metricLines(t, run2.Dir)
	if len(got) != len(want) {
		t.Fatalf("%d metric lines through the learner, %d in-process", len(got), len(want))
	}
	trained := 0
	for i := range want {
		if d, ok := got[i]["sync/probe_max_abs_diff"]; ok {
			// The weight-sync probe: the same backend on both sides scores the probe the same.
			if d != 0.0 {
				t.Fatalf("metrics line %d: probe difference %v, want 0", i+1, d)
			}
			delete(got[i], "sync/probe_max_abs_diff")
			if d := got[i]["sync/probe_mean_abs_diff"]; d != 0.0 {
				t.Fatalf("metrics line %d: mean probe difference %v, want 0", i+1, d)
			}
			delete(got[i], "sync/probe_mean_abs_diff")
		} else if want[i]["phase"] == "rl" && want[i]["optim/lr"] != nil {
			t.Fatalf("metrics line %d: a trained step without sync/probe_max_abs_diff", i+1)
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("metrics line %d differs:\nthrough the learner %v\nin-process          %v", i+1, got[i], want[i])
		}
		if want[i]["phase"] == "rl" && want[i]["optim/lr"] != nil {
			trained++
		}
	}
	rl := cfg.Phases[1].RL
	if updates := int64(4 * rl.Epochs * rl.Minibatches); trained != 4 || g.b.Opt.Steps() != updates {
		t.Fatalf("%d RL steps trained, the learner applied %d updates; want 4 and %d", trained, g.b.Opt.Steps(), updates)
	}
}

// A learner that hands the sampler other weights than those it trains (a sync that went wrong)
// stops the run at the first update with the probe's numbers.
func TestSyncProbeCatchesOtherWeights(t *testing.T) {
	cfg := tinyConfig(t, t.TempDir(), "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05")
	g := &goLearner{cfg: cfg.Phases[1].Optim}
	srv, err := remote.NewServer(g, "", 0, 0, remote.Info{})
	if err != nil {
		t.Fatal(err)
	}
	srv.SaveWeights = func(dir string, _ int32) (int64, error) {
		right := g.b.Model
		g.b.Model = right.Clone()
		defer func() { g.b.Model = right }()
		for i := range g.b.Model.Params.Data {
			g.b.Model.Params.Data[i] *= 1.5
		}
		return g.save(dir, false)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg.Learner = learn.BackendConfig{Backend: learn.BackendHTTP, URL: hs.URL}
	run, err := NewRun(cfg, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	g.run = run.Dir
	_, err = run.Train(context.Background())
	if err == nil || !strings.Contains(err.Error(), "weight sync probe after v") || !strings.Contains(err.Error(), "not the learner's") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

// A short RL run on calc through the reference PyTorch learner (learner.backend torch, started
// and stopped by the run) trains like the built-in learner: the first update, from the same
// weights on the same episodes, gives the same loss and gradient norm to float32 tolerance, every
// step trains, every sync's probe agrees, and the learner's log is in the run directory. Long
// (Debian's torch computes with a generic BLAS): not in -short.
func TestRunThroughTorchLearner(t *testing.T) {
	if testing.Short() {
		t.Skip("a run through the PyTorch learner takes minutes on CPU")
	}
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skipf("needs %s with torch (Debian's python3-torch): %v", python, err)
	}
	root, err := filepath.Abs("../learners/torch")
	if err != nil {
		t.Fatal(err)
	}
	sets := []string{"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05"}
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := tinyConfig(t, t.TempDir(), sets...)
	cfg.Learner = learn.BackendConfig{Backend: learn.BackendTorch, Python: python, Path: root, Device: "cpu"}
	run2, err := NewRun(cfg, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run2.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, got := phaseLines(t, run.Dir, "rl"), phaseLines(t, run2.Dir, "rl")
	if len(got) != 4 || len(want) != 4 {
		t.Fatalf("%d RL steps through torch, %d in-process; want 4", len(got), len(want))
	}
	for _, k := range []string{"loss/total", "signal/grad_norm", "explore/entropy"} {
		a, b := want[0][k].(float64), got[0][k].(float64)
		if math.Abs(a-b) > 1e-6+1e-4*math.Abs(a) {
			t.Errorf("first update's %s: torch %v, built-in %v", k, b, a)
		}
	}
	for i, m := range got {
		if d, ok := m["sync/probe_max_abs_diff"].(float64); !ok || d > 1e-3 {
			t.Errorf("step %d: probe difference %v", i+1, m["sync/probe_max_abs_diff"])
		}
		t.Logf("step %d: loss torch %v built-in %v", i+1, m["loss/total"], want[i]["loss/total"])
	}
	if b, err := os.ReadFile(filepath.Join(run2.Dir, "learner", "learner.log")); err != nil || !strings.Contains(string(b), "agentrl_learner: listening") {
		t.Fatalf("learner log: %v %q", err, b)
	}
}

// A learner killed in the middle of an RL step fails the run with an error naming the learner;
// the run resumes from its last checkpoint on a restarted learner (a new epoch, loaded from the
// checkpoint's state) and ends with the uninterrupted run's metrics: nothing trained twice,
// nothing lost.
func TestResumeAfterLearnerDies(t *testing.T) {
	sets := []string{"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05"}
	whole, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := metricLines(t, whole.Dir)

	cfg := tinyConfig(t, t.TempDir(), sets...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener, dieAt int) (*goLearner, *httptest.Server) {
		g := &goLearner{cfg: cfg.Phases[1].Optim}
		srv, err := remote.NewServer(g, "", 0, 0, remote.Info{})
		if err != nil {
			t.Fatal(err)
		}
		srv.SaveWeights = func(dir string, _ int32) (int64, error) { return g.save(dir, false) }
		steps := 0
		hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/optim_step" {
				if steps++; steps == dieAt {
					if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
						conn.Close() // the learner died mid-step
					}
					return
				}
			}
			srv.ServeHTTP(w, r)
		}))
		hs.Listener.Close()
		hs.Listener = ln
		hs.Start()
		return g, hs
	}
	// 4 updates a step, a checkpoint every 2 steps: the learner dies in step 3's second update.
	g1, hs1 := serve(ln, 10)
	cfg.Learner = learn.BackendConfig{Backend: learn.BackendHTTP, URL: "http://" + addr, Timeout: 10 * time.Second}
	run, err := NewRun(cfg, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	g1.run = run.Dir
	_, err = run.Train(context.Background())
	if !errors.Is(err, learn.ErrLearner) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("run with a learner that died: err = %v", err)
	}
	t.Log(err)
	hs1.Close()

	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g2, hs2 := serve(ln2, -1)
	defer hs2.Close()
	g2.run = run.Dir
	resumed, err := Resume(run.Dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resumed.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := metricLines(t, run.Dir)
	if len(got) != len(want) {
		t.Fatalf("%d metric lines after the resume, %d uninterrupted", len(got), len(want))
	}
	for i := range want {
		delete(got[i], "sync/probe_max_abs_diff")
		delete(got[i], "sync/probe_mean_abs_diff")
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("metrics line %d differs:\nresumed       %v\nuninterrupted %v", i+1, got[i], want[i])
		}
	}
	if n := g2.b.Opt.Steps(); n != 16 {
		t.Fatalf("the restarted learner ends at %d updates, want 16 (4 steps × 4 minibatches)", n)
	}
}
