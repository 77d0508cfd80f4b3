package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// checkDistReplay replays a finished distributed run (items 1 and 20 of issue 29): every step's
// learning matches the run's (the data plane's counters aside); and with one step's recording
// removed, the replay still goes to the end, trains that step on nothing, and names the learning
// metrics that differ instead of saying the run stopped.
func checkDistReplay(t *testing.T, dir string, steps int) {
	t.Helper()
	opts := ReplayOptions{Opts: Options{Envs: all.Builtins()}}
	opts.OutDir = t.TempDir()
	sum, err := Replay(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("replay of the distributed run: %v", err)
	}
	if sum.Steps != steps || sum.Compared != steps || sum.Mismatch != "" {
		t.Fatalf("replay of the distributed run: %d steps, %d compared (want %d): %s", sum.Steps, sum.Compared, steps, sum.Mismatch)
	}

	cut := copyRun(t, dir)
	dropStepRecording(t, filepath.Join(cut, "trajectories.atrs"), "rl", steps)
	var out strings.Builder
	opts.Out, opts.OutDir = &out, t.TempDir()
	sum, err = Replay(context.Background(), cut, opts)
	if err != nil {
		t.Fatalf("replay with step %d's recording removed: %v", steps, err)
	}
	if strings.Contains(out.String(), "stopped") || sum.Steps != steps {
		t.Fatalf("replay with step %d's recording removed replayed %d steps and said:\n%s", steps, sum.Steps, out.String())
	}
	prefix := fmt.Sprintf("step rl/%d: ", steps)
	if !strings.HasPrefix(sum.Mismatch, prefix) || strings.Count(sum.Mismatch, " in the replay") < 2 || strings.Contains(sum.Mismatch, "dist/") {
		t.Fatalf("mismatch %q: want the learning metrics of step %d that differ, and no data-plane counter", sum.Mismatch, steps)
	}
}

// dropStepRecording rewrites a trajectory file without the trajectories recorded for one step.
func dropStepRecording(t *testing.T, path, phase string, step int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := traj.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	var keep []*traj.Trajectory
	dropped := 0
	for {
		tr, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if meta(tr, "phase") == phase && meta(tr, "step") == strconv.Itoa(step) {
			dropped++
			continue
		}
		keep = append(keep, tr)
	}
	f.Close()
	if dropped == 0 {
		t.Fatalf("nothing recorded for %s step %d", phase, step)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w, _, err := traj.OpenFile(path, traj.WriterOptions{Compression: traj.CompressZstd})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range keep {
		if err := w.Write(tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
