package pipeline

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/learn/remote"
	"github.com/agentrl/agentrl/optim"
)

// TestHelperLearnerProcess is the learner process of TestLearnerRestart. The run starts it as it
// starts the PyTorch learner (`PYTHON -m agentrl_learner --listen A --ready-file F --model DIR
// --state DIR --beta1 …`), through a script that runs this test binary; it serves the built-in
// backend, loaded from --state, on learn/remote's server. AGENTRL_TEST_LEARNER_FAULT
// ("KIND:N:MARKER") makes its N-th optim_step fail once across processes (the first to create
// MARKER): die exits mid-step, hang never answers, reset restarts the learner inside the process
// from its --state folder (an older state, under a new epoch) and answers from there.
func TestHelperLearnerProcess(t *testing.T) {
	if os.Getenv("AGENTRL_TEST_LEARNER") == "" {
		t.Skip("a learner process of TestLearnerRestart")
	}
	args := flag.Args()
	get := func(name string) string {
		for i := 0; i+1 < len(args); i++ {
			if args[i] == name {
				return args[i+1]
			}
		}
		return ""
	}
	f32 := func(name string) float32 {
		x, err := strconv.ParseFloat(get(name), 32)
		if err != nil {
			t.Fatalf("%s %q: %v", name, get(name), err)
		}
		return float32(x)
	}
	oc := optim.Config{Beta1: f32("--beta1"), Beta2: f32("--beta2"), Eps: f32("--eps"), WeightDecay: f32("--weight-decay")}
	model, state := get("--model"), get("--state")
	load := func() *remote.Server {
		g := &goLearner{cfg: learn.Config{Config: oc}, run: filepath.Dir(filepath.Dir(model))}
		if err := g.LoadState(context.Background(), state); err != nil {
			t.Fatal(err)
		}
		srv, err := remote.NewServer(g, "", 0, g.b.Opt.Steps(), remote.Info{})
		if err != nil {
			t.Fatal(err)
		}
		srv.SaveWeights = func(dir string, _ int32) (int64, error) { return g.save(dir, false) }
		return srv
	}
	var cur atomic.Pointer[remote.Server]
	cur.Store(load())
	kind, rest, _ := strings.Cut(os.Getenv("AGENTRL_TEST_LEARNER_FAULT"), ":")
	at, marker, _ := strings.Cut(rest, ":")
	failAt, _ := strconv.Atoi(at)
	var steps atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/optim_step" && int(steps.Add(1)) == failAt {
			if f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				f.Close()
				switch kind {
				case "die":
					os.Exit(3)
				case "hang":
					select {}
				case "reset":
					cur.Store(load())
				}
			}
		}
		cur.Load().ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", get("--listen"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(get("--ready-file"), []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	http.Serve(ln, handler)
}

// learnerScript is a stand-in for the python interpreter that runs TestHelperLearnerProcess
// with the arguments the run gives the PyTorch learner.
func learnerScript(t *testing.T) string {
	bin, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "python")
	script := fmt.Sprintf("#!/bin/sh\nAGENTRL_TEST_LEARNER=1 exec %q -test.run='^TestHelperLearnerProcess$' -test.count=1 -- \"$@\"\n", bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A local learner the run started that dies mid-step, stops answering, or restarts by itself
// from an older state is restarted from the state saved before the step, with learner.restart,
// and the step is trained again: the run logs what the uninterrupted in-process run logs, bit
// for bit (nothing trained twice, nothing lost), with learner/restarts on the step that was
// redone. Without restarts left the run stops with the learner's failure and how to resume.
func TestLearnerRestart(t *testing.T) {
	sets := []string{"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05"}
	ref, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := metricLines(t, ref.Dir)
	python := learnerScript(t)
	train := func(t *testing.T, fault string, restart int) (*Run, error) {
		cfg := tinyConfig(t, t.TempDir(), sets...)
		cfg.Learner = learn.BackendConfig{Backend: learn.BackendTorch, Python: python, Timeout: 5 * time.Second, Restart: restart}
		t.Setenv("AGENTRL_TEST_LEARNER_FAULT", fault+":6:"+filepath.Join(t.TempDir(), "marker"))
		run, err := NewRun(cfg, Options{Envs: all.Builtins()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = run.Train(context.Background())
		return run, err
	}
	for _, fault := range []string{"die", "hang", "reset"} {
		t.Run(fault, func(t *testing.T) {
			run, err := train(t, fault, 1)
			if err != nil {
				t.Fatal(err)
			}
			got := metricLines(t, run.Dir)
			if len(got) != len(want) {
				t.Fatalf("%d metric lines, want %d", len(got), len(want))
			}
			restarts := 0
			for i := range want {
				if n, ok := got[i]["learner/restarts"]; ok {
					if n != 1.0 {
						t.Fatalf("metrics line %d: learner/restarts %v", i+1, n)
					}
					restarts++
				}
				for k := range got[i] {
					if strings.HasPrefix(k, "sync/") || k == "learner/restarts" {
						delete(got[i], k)
					}
				}
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("metrics line %d differs:\nrestarted     %v\nuninterrupted %v", i+1, got[i], want[i])
				}
			}
			if restarts != 1 {
				t.Fatalf("%d steps report a restart, want 1", restarts)
			}
		})
	}
	t.Run("no restart", func(t *testing.T) {
		run, err := train(t, "reset", 0)
		for _, w := range []string{"the learner restarted", "the run stops here: resume it from its last checkpoint (agentrl train --resume " + run.Dir + ")"} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("a learner that restarted without learner.restart: %v, want it to say %q", err, w)
			}
		}
	})
}
