package pipeline

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/traj"
)

// Item 2 of issue 29: dynamic sampling on workers. On test-levels two thirds of the groups have
// no reward variance, so steps need more rounds: the learner publishes them to the workers, logs
// the rounds, trains only the informative groups it kept, and replay reproduces every step's
// learning metrics from the recording.
func TestDistributedDynamicSampling(t *testing.T) {
	testDistDynamicSampling(t, false)
}

// A learner killed mid-run and resumed draws the same later rounds for the steps it retrains:
// the finished run's recording replays to its logged metrics.
func TestDistributedDynamicSamplingResume(t *testing.T) {
	testDistDynamicSampling(t, true)
}

func testDistDynamicSampling(t *testing.T, crash bool) {
	const groups, maxRounds, steps = 2, 4, 4
	c := tinyConfig(t, t.TempDir(), append(slices.Clone(distSets),
		"phases.rl.envs=[{name: test-levels, weight: 1}]", "phases.rl.steps=4", "phases.rl.rl.groups_per_step=2",
		"phases.rl.rl.dynamic_sampling={max_rounds: 4}")...)
	run, err := NewRun(c, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	wg.Go(func() {
		url, tok := waitDistServer(t, wctx, run.Dir)
		conn, err := dist.Dial(url, dist.Auth{Token: tok}, "test-worker")
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		for wctx.Err() == nil {
			if _, err := RunWorker(wctx, WorkerOptions{Conn: conn, Run: "tiny", ID: "w0", Envs: testEnvs(), Concurrency: 4, Slots: 8}); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if crash {
		stop, stopNow := context.WithCancel(ctx)
		defer stopNow()
		run.onDistStep = func(_ *distSession, step int) {
			if step == 2 {
				stopNow() // after the checkpoint of step 2, in the middle of step 3
			}
		}
		if _, err := run.Train(stop); !errors.Is(err, context.Canceled) {
			t.Fatalf("the stopped run returned %v, want context.Canceled", err)
		}
		if run, err = Resume(run.Dir, Options{Envs: testEnvs()}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = run.Train(ctx)
	stopWorkers()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	// The recording, step by step: every group the step published, in the order drawn.
	f, err := os.Open(filepath.Join(run.Dir, "trajectories.atrs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := traj.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	byStep := map[string][]*traj.Trajectory{}
	for {
		tr, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if meta(tr, "phase") == "rl" {
			byStep[meta(tr, "step")] = append(byStep[meta(tr, "step")], tr)
		}
	}
	extra := 0
	var lines []map[string]any
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" && m["eval"] == nil {
			lines = append(lines, m)
		}
	}
	if len(lines) != steps {
		t.Fatalf("%d rl steps logged, want %d", len(lines), steps)
	}
	for _, m := range lines {
		step := int(m["step"].(float64))
		informative, maxIndex := 0, 0
		for _, g := range recordedGroups(byStep[strconv.Itoa(step)]) {
			maxIndex = max(maxIndex, int(g[0].GroupID&0xffff))
			if ok, _ := reward.DropFailed(g); len(g) >= 2 && reward.Informative(ok) {
				informative++
			}
		}
		rounds, kept, partial := m["signal/sample_rounds"].(float64), m["signal/groups_kept"].(float64), m["signal/partial_batch"]
		if rounds < 1 || rounds > maxRounds {
			t.Fatalf("step %d: %v rounds, want 1 to %d", step, rounds, maxRounds)
		}
		if rounds > 1 {
			extra++
			if maxIndex < groups {
				t.Fatalf("step %d: %v rounds but no group beyond the first round's was recorded", step, rounds)
			}
		}
		// Dynamic sampling keeps the informative groups, up to groups_per_step; it stops drawing
		// once it has them, and runs out of rounds only short of them.
		if want := min(groups, informative); int(kept) != want {
			t.Fatalf("step %d: %v groups kept, the recording holds %d informative (of %d wanted)", step, kept, informative, groups)
		}
		if (kept < groups) != (partial == float64(1) || partial == true) || kept < groups && rounds != maxRounds {
			t.Fatalf("step %d: %v groups kept after %v rounds, partial batch %v", step, kept, rounds, partial)
		}
	}
	t.Logf("%d of %d steps drew more than one round", extra, steps)
	if extra == 0 {
		t.Fatal("no step drew a second round, though two thirds of test-levels' groups are uninformative")
	}

	opts := ReplayOptions{Opts: Options{Envs: testEnvs()}}
	opts.OutDir = t.TempDir()
	sum, err := Replay(context.Background(), run.Dir, opts)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if sum.Steps != steps || sum.Compared != steps || sum.Mismatch != "" {
		t.Fatalf("replay: %d steps, %d compared (want %d): %s", sum.Steps, sum.Compared, steps, sum.Mismatch)
	}
}
