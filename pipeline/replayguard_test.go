package pipeline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// Item 19 of issue 29: `agentrl replay --out DIR` never writes over a run's metrics.jsonl (another
// run's, or the replayed run's own) and takes the folder's lock.
func TestReplayRefusesAFolderHoldingARun(t *testing.T) {
	src := trainedRun(t, replaySets...)
	other := copyRun(t, src)
	metrics := func(dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	opts := ReplayOptions{Opts: Options{Envs: all.Builtins()}}
	for _, c := range []struct{ name, out, want string }{
		{"another run", other, "holds a run"},
		{"the run itself", src, "the run's own folder"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := metrics(c.out)
			o := opts
			o.OutDir = c.out
			_, err := Replay(context.Background(), src, o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("replay into %s: err %v, want a refusal naming %q", c.name, err, c.want)
			}
			if !bytes.Equal(metrics(c.out), before) {
				t.Errorf("replay changed the metrics.jsonl of %s", c.name)
			}
		})
	}
	t.Run("a folder in use", func(t *testing.T) {
		out := t.TempDir()
		unlock, err := LockRun(out)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		o := opts
		o.OutDir = out
		if _, err := Replay(context.Background(), src, o); !errors.Is(err, ErrLocked) {
			t.Fatalf("replay into a locked folder: err %v, want ErrLocked", err)
		}
	})
	t.Run("an earlier replay's folder", func(t *testing.T) {
		o := opts
		o.OutDir = t.TempDir()
		for range 2 {
			if sum, err := Replay(context.Background(), src, o); err != nil || sum.Mismatch != "" {
				t.Fatalf("replay: %v %+v", err, sum)
			}
		}
	})
}
