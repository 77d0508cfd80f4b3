package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/remote"
)

// BenchmarkLearnerIdleRemoteEnv measures how long the learner waits for episodes when calc runs
// in-process and when the same environment is served over loopback HTTP (agentrl's own server,
// through a remote block): the calc preset's RL phase (16 groups of 8, untrained policy) for a
// few steps, synchronous (the learner is idle while a step's episodes are generated:
// 1 − train_s/step_s) and asynchronous with one-step overlap in continuous mode (the learner is
// idle while it waits for finished groups: learner_wait_s/step_s). Each iteration is a whole run;
// run it with -benchtime 1x. It reports the idle fraction, the environment's seconds per step
// (time/env_s, summed over the episodes) and the seconds per step.
func BenchmarkLearnerIdleRemoteEnv(b *testing.B) {
	const steps = 10
	spec, err := testEnvs().Lookup("calc")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := remote.NewServer(spec, remote.ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	envs := map[string]string{
		"in-process": "[{name: calc, weight: 1}]",
		"remote":     fmt.Sprintf("[{name: calcremote, weight: 1, remote: {url: %q, max_sessions: 64}}]", hs.URL),
	}
	modes := map[string][]string{
		"sync": nil,
		"async": {"phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2",
			"phases.rl.rl.async.max_staleness=1"},
	}
	for _, mode := range []string{"sync", "async"} {
		for _, arm := range []string{"in-process", "remote"} {
			b.Run(mode+"/"+arm, func(b *testing.B) {
				var idle, env, step float64
				for b.Loop() {
					c, err := config.Load(testEnvs(), "calc", "", append([]string{
						"runs_dir=" + b.TempDir(), "name=idle", "tokenizer.corpus_samples=2000",
						"phases.rl.envs=" + envs[arm], fmt.Sprintf("phases.rl.steps=%d", steps), "phases.rl.optim.warmup=1",
						"phases.rl.rl.dynamic_sampling=null", "eval.tasks=4", "eval.samples=1",
					}, modes[mode]...))
					if err != nil {
						b.Fatal(err)
					}
					c.Phases = c.Phases[1:]
					run, err := NewRun(c, Options{Envs: testEnvs()})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := run.Train(context.Background()); err != nil {
						b.Fatal(err)
					}
					idle, env, step = idleOf(b, run.Dir, mode == "async")
				}
				b.ReportMetric(idle, "idle-frac")
				b.ReportMetric(env, "env-s/step")
				b.ReportMetric(step, "s/step")
			})
		}
	}
}

// idleOf reads a run's RL steps from metrics.jsonl: the learner's idle fraction of their time,
// and the environment's and the whole step's mean seconds.
func idleOf(b *testing.B, dir string, async bool) (idle, env, step float64) {
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var wait, total, envS float64
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			b.Fatal(err)
		}
		st, ok := m["time/step_s"].(float64)
		if !ok {
			continue // not an RL step (an evaluation)
		}
		train, _ := m["time/train_s"].(float64)
		e, _ := m["time/env_s"].(float64)
		w := st - train
		if async {
			w, _ = m["time/learner_wait_s"].(float64)
		}
		wait, total, envS, n = wait+w, total+st, envS+e, n+1
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if n == 0 || total == 0 {
		b.Fatalf("%s: no RL step in metrics.jsonl", dir)
	}
	return wait / total, envS / float64(n), total / float64(n)
}
