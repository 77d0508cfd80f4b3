package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// runMarkers are what a run directory holds and a replay's folder does not: replay refuses to
// write into a folder with any of them.
var runMarkers = []string{"config.yaml", "trajectories.atrs", checkpointsDir, runIDFile}

// openReplayDir makes the replay's folder out for the run in runDir and takes its lock: it
// refuses the run's own folder, any folder that holds a run (its metrics.jsonl is that run's
// record) and one another process holds. unlock releases the lock.
func openReplayDir(runDir, out string) (unlock func(), err error) {
	same := func(a, b string) bool {
		sa, errA := os.Stat(a)
		sb, errB := os.Stat(b)
		return errA == nil && errB == nil && os.SameFile(sa, sb)
	}
	if same(runDir, out) {
		return nil, fmt.Errorf("--out %s is the run's own folder: the replay would replace the run's metrics.jsonl; give another folder (default %s)", out, filepath.Join(runDir, "replay"))
	}
	for _, m := range runMarkers {
		if _, err := os.Lstat(filepath.Join(out, m)); err == nil {
			return nil, fmt.Errorf("--out %s holds a run (it has %s): the replay would replace that run's metrics.jsonl; give an empty folder or one an earlier replay wrote", out, m)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	return LockRun(out)
}
