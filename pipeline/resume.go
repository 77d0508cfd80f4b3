package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
)

// progressState is where a run stands; it is saved in every checkpoint (checkpoint.State.Extra)
// and is all, beside the weights and the optimizer, that resuming needs: every random choice of
// a step derives from (seed, phase, step).
type progressState struct {
	Phase   int   `json:"phase"`   // phase in progress (len(phases) when all are done)
	Step    int   `json:"step"`    // steps of that phase completed
	Version int32 `json:"version"` // policy version
	// Byte lengths of metrics.jsonl and the trajectory stream when the checkpoint was taken;
	// resuming cuts both back to them, dropping what the interrupted steps wrote.
	MetricsOffset int64        `json:"metrics_offset"`
	TrajOffset    int64        `json:"traj_offset"`
	Evals         []EvalReport `json:"evals"`
	Best          float64      `json:"best"` // best mean held-out pass@1 so far (-1 before any)
}

const (
	checkpointsDir = "checkpoints"
	latestFile     = "LATEST"
	bestName       = "best"
)

func (r *Run) checkpointDir(name string) string { return filepath.Join(r.Dir, checkpointsDir, name) }

// refName is the checkpoint of the frozen reference policy of an RL phase.
func refName(phase string) string { return "ref-" + phase }

// saveCheckpoint writes the model, tokenizer, optimizer state and progress as checkpoint
// "<phase>-<step>" (or the given name), points LATEST at it and drops old ones beyond Keep.
func (r *Run) saveCheckpoint(l *learn.Learner, name string) error {
	if err := r.trajs.Sync(); err != nil {
		return err
	}
	if err := r.metrics.f.Sync(); err != nil {
		return err
	}
	st, err := r.stateSnapshot(l)
	if err != nil {
		return err
	}
	if err := checkpoint.Save(r.checkpointDir(name), r.model, r.tok, st); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := writeFileAtomic(filepath.Join(r.Dir, checkpointsDir, latestFile), []byte(name+"\n")); err != nil {
		return err
	}
	return r.pruneCheckpoints(name)
}

func (r *Run) stateSnapshot(l *learn.Learner) (*checkpoint.State, error) {
	mo, err := r.metrics.f.Seek(0, 1)
	if err != nil {
		return nil, err
	}
	r.state.MetricsOffset, r.state.TrajOffset = mo, r.trajs.Offset()
	r.state.Version = r.version
	r.state.Evals = r.evals
	extra, err := json.Marshal(r.state)
	if err != nil {
		return nil, err
	}
	st := &checkpoint.State{Extra: extra}
	if l != nil {
		optState := l.Opt.State()
		st.Optimizer = &optState
	}
	return st, nil
}

// pruneCheckpoints keeps the newest Keep step checkpoints (by their progress), the best one,
// the reference policies and the one just written.
func (r *Run) pruneCheckpoints(current string) error {
	root := filepath.Join(r.Dir, checkpointsDir)
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	type ck struct {
		name        string
		phase, step int
	}
	var cks []ck
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() || n == bestName || strings.HasPrefix(n, "ref-") || strings.HasPrefix(n, ".") || n == current {
			continue
		}
		var p, s int
		if _, err := fmt.Sscanf(n[strings.LastIndexByte(n, '-')+1:], "p%d.s%d", &p, &s); err != nil {
			continue
		}
		cks = append(cks, ck{n, p, s})
	}
	sort.Slice(cks, func(i, j int) bool {
		if cks[i].phase != cks[j].phase {
			return cks[i].phase > cks[j].phase
		}
		return cks[i].step > cks[j].step
	})
	for i, c := range cks {
		if i+1 >= r.Cfg.Checkpoint.Keep { // the current one counts toward Keep
			if err := os.RemoveAll(filepath.Join(root, c.name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// stepName names the checkpoint taken after step of phase pi.
func (r *Run) stepName(pi, step int) string {
	return fmt.Sprintf("%s-p%d.s%06d", r.Cfg.Phases[pi].Name, pi, step)
}

// Resume reopens the run directory dir: it reads its config, loads its latest checkpoint (or
// starts over when there is none), cuts the metrics and trajectory files back to what that
// checkpoint had seen, and continues. With the same config, the metrics it writes are those of
// a run that was never interrupted.
func Resume(dir string, opts Options) (*Run, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: %w", dir, err)
	}
	cfg, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: config.yaml: %w", dir, err)
	}
	if err := cfg.Validate(opts.Envs); err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: %w", dir, err)
	}
	r := &Run{Cfg: cfg, Dir: dir, opts: opts, resuming: true}
	latest, err := os.ReadFile(filepath.Join(dir, checkpointsDir, latestFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, nil // nothing was checkpointed: start over in the same directory
	}
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(string(latest))
	ck, err := checkpoint.Load(r.checkpointDir(name))
	if err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: %w", dir, err)
	}
	if ck.State == nil {
		return nil, fmt.Errorf("pipeline: resume %s: checkpoint %s has no trainer state", dir, name)
	}
	if err := json.Unmarshal(ck.State.Extra, &r.state); err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: checkpoint %s: trainer state: %w", dir, name, err)
	}
	if r.state.Phase < 0 || r.state.Phase > len(cfg.Phases) {
		return nil, fmt.Errorf("pipeline: resume %s: checkpoint %s is at phase %d of %d", dir, name, r.state.Phase, len(cfg.Phases))
	}
	r.model, r.tok, r.version, r.evals = ck.Model, ck.Tokenizer, r.state.Version, r.state.Evals
	r.restoredOpt = ck.State.Optimizer
	r.restored = true
	return r, nil
}

// cutFiles truncates metrics and trajectories to the checkpoint's offsets (or removes them when
// starting over).
func (r *Run) cutFiles() error {
	for _, f := range []struct {
		name string
		off  int64
	}{{"metrics.jsonl", r.state.MetricsOffset}, {"trajectories.atrs", r.state.TrajOffset}} {
		p := filepath.Join(r.Dir, f.name)
		err := os.Truncate(p, f.off)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pipeline: resume: cut %s back to %d bytes: %w", f.name, f.off, err)
		}
	}
	return nil
}

// loadRef loads the frozen reference policy saved when an RL phase started.
func (r *Run) loadRef(phase string) (*model.Model, error) {
	return checkpoint.LoadModel(r.checkpointDir(refName(phase)))
}
