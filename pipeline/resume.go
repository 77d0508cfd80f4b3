package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/traj"
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
	// KLCoef is the adaptive KL penalty's coefficient in the RL phase in progress (absent
	// without one).
	KLCoef *float64 `json:"kl_coef,omitempty"`
	// Monitor is the state of the monitor's actions in the RL phase in progress (absent when none
	// is on): the controllers' knobs and the task sampler's estimates.
	Monitor *monitor.State `json:"monitor,omitempty"`
	// Dist is the data plane's consumer state at the checkpoint (rl.async.workers): the
	// trajectories trained and dropped, so that a resumed learner takes none twice.
	Dist *dist.ConsumerState `json:"dist,omitempty"`
	// RunID is the run's id (run.id), Config the YAML of the configuration the run trained with
	// and ConfigSHA256 its hash: resuming checks them against the run directory (resumecheck.go).
	RunID        string `json:"run_id,omitempty"`
	Config       string `json:"config,omitempty"`
	ConfigSHA256 string `json:"config_sha256,omitempty"`
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
	if l != nil {
		if err := r.fetchLearner(l.Opt); err != nil {
			return fmt.Errorf("checkpoint %s: %w", name, err)
		}
	}
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
	if r.tinker != nil { // the weights are saved on the service, named in the folder (tinker.go)
		if err := r.saveTinkerCheckpoint(r.checkpointDir(name), name, st, true); err != nil {
			return err
		}
	} else if err := checkpoint.Save(r.checkpointDir(name), r.model, r.tok, st); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := r.recordPrompts(r.checkpointDir(name)); err != nil {
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
	if r.state.Config == "" {
		cfg, err := config.Encode(r.Cfg)
		if err != nil {
			return nil, err
		}
		r.state.Config, r.state.ConfigSHA256 = string(cfg), configSHA256(cfg)
	}
	r.state.RunID = r.runID
	extra, err := json.Marshal(r.state)
	if err != nil {
		return nil, err
	}
	st := &checkpoint.State{Extra: extra}
	if l != nil && l.Opt != nil { // a Tinker run's optimizer is on the service
		optState := l.Opt.State()
		st.Optimizer = &optState
	}
	return st, nil
}

// pruneCheckpoints keeps the newest Keep step checkpoints (by their progress), the best one,
// the reference policies, the one just written, and the checkpoints at the run's start and at
// each phase's end (where `agentrl replay` starts a phase).
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
		p, s, ok := parseStepName(n)
		if !ok || (p == 0 && s == 0) || (p < len(r.Cfg.Phases) && s == r.Cfg.Phases[p].Steps) {
			continue // the run's start and each phase's end are kept: replay starts phases from them
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

// Resume reopens the run directory dir: it takes the run's lock (held until Train returns), reads
// its config, loads its latest checkpoint, cuts the metrics and trajectory files back to what
// that checkpoint had seen, and continues. With the same config, the metrics it writes are those
// of a run that was never interrupted.
//
// The checkpoint is the one checkpoints/LATEST names. When LATEST is missing, empty or torn, or
// names a checkpoint that does not load, the newest step checkpoint that loads is used instead,
// and the run's output says so. LATEST must name a folder inside checkpoints/: a name with a
// path separator or ".." is an error. A run with no usable checkpoint starts over only when it
// recorded nothing beyond the evaluation before training; otherwise resuming is an error.
// Init is not needed (nor checked) when a checkpoint is resumed.
func Resume(dir string, opts Options) (*Run, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: %w", dir, err)
	}
	cfg, err := config.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: config.yaml: %w", dir, err)
	}
	unlock, err := LockRun(dir)
	if err != nil {
		return nil, fmt.Errorf("pipeline: resume %s: %w", dir, err)
	}
	r := &Run{Cfg: cfg, Dir: dir, opts: opts, resuming: true, unlock: unlock}
	run, err := r.resumeChecked()
	if err != nil {
		unlock()
		return nil, fmt.Errorf("pipeline: resume %s: %w", dir, err)
	}
	return run, nil
}

func (r *Run) resume() (*Run, error) {
	if len(r.Cfg.Phases) == 0 {
		return nil, r.Cfg.Validate(r.opts.Envs) // says what is missing
	}
	rc, why, err := r.latestCheckpoint()
	if err != nil {
		return nil, err
	}
	vcfg := r.Cfg
	if rc != nil && !r.Cfg.Learner.Tinker() {
		vcfg.Init = "" // only a fresh start reads it (and a tinker run's resume: its base model)
	}
	if err := vcfg.Validate(r.opts.Envs); err != nil {
		return nil, err
	}
	if rc == nil {
		if err := r.checkNothingRecorded(); err != nil {
			return nil, fmt.Errorf("%s, and %w", why, err)
		}
		r.printf("note: %s; the run recorded no training yet, so it starts over\n", why)
		return r, nil
	}
	r.state = rc.state
	ck := rc.ck
	r.model, r.tok, r.version, r.evals = ck.Model, ck.Tokenizer, r.state.Version, r.state.Evals
	r.restoredOpt = ck.State.Optimizer
	r.remoteFrom = rc.remote
	r.restored = true
	return r, nil
}

// resumable is a loaded checkpoint with its progress.
type resumable struct {
	ck    *checkpoint.Checkpoint
	state progressState
	// remote is the training state on a Tinker service that a checkpoint of a tinker run names
	// (ck.Model is then the base model from init).
	remote *checkpoint.RemoteWeights
}

// errLatestOutside is a LATEST naming something outside checkpoints/: not damage, tampering.
var errLatestOutside = errors.New("names a path, not a checkpoint of this run")

// maxLatest bounds what is read of LATEST: a checkpoint name is short.
const maxLatest = 4096

// parseLatest reads the checkpoint name in LATEST's content. An empty, torn or garbled name is
// an error (and resuming falls back); a name that would leave checkpoints/ wraps errLatestOutside.
func parseLatest(data []byte) (string, error) {
	name := strings.TrimSpace(string(data))
	switch {
	case name == "":
		return "", errors.New("is empty")
	case strings.ContainsAny(name, `/\`) || name == "." || name == ".." || filepath.IsAbs(name):
		return "", fmt.Errorf("%w: %q", errLatestOutside, name)
	case strings.ContainsFunc(name, func(c rune) bool { return c < 0x21 || c == 0x7f || c == utf8.RuneError }) || len(data) >= maxLatest:
		return "", fmt.Errorf("holds %q, not a checkpoint name", clip(name, 64))
	}
	if _, _, ok := parseStepName(name); !ok || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("holds %q, not a step checkpoint's name (<phase>-p<N>.s<step>)", clip(name, 64))
	}
	return name, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// parseStepName reads the phase index and step of a checkpoint named by stepName.
func parseStepName(name string) (phase, step int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return 0, 0, false
	}
	var rest string
	if n, err := fmt.Sscanf(name[i+1:], "p%d.s%d%s", &phase, &step, &rest); n != 2 || err == nil || phase < 0 || step < 0 {
		return 0, 0, false
	}
	return phase, step, name[i+1:] == fmt.Sprintf("p%d.s%06d", phase, step)
}

// latestCheckpoint loads the checkpoint to resume from (see Resume). It returns nil and the
// reason when the run has none that loads.
func (r *Run) latestCheckpoint() (*resumable, string, error) {
	root := filepath.Join(r.Dir, checkpointsDir)
	tried := ""
	var why string
	data, err := readLimited(filepath.Join(root, latestFile), maxLatest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		why = "checkpoints/LATEST is missing"
	case err != nil:
		return nil, "", fmt.Errorf("checkpoints/LATEST: %w", err)
	default:
		name, err := parseLatest(data)
		if errors.Is(err, errLatestOutside) {
			return nil, "", fmt.Errorf("checkpoints/LATEST %v; it must hold the name of a folder in %s (delete it to resume from the newest intact checkpoint)", err, root)
		}
		if err != nil {
			why = fmt.Sprintf("checkpoints/LATEST %v", err)
			break
		}
		rc, err := r.loadResumable(name)
		if err == nil {
			return rc, "", nil
		}
		if errors.Is(err, errConfigChanged) {
			return nil, "", err
		}
		tried, why = name, fmt.Sprintf("checkpoint %s, which checkpoints/LATEST names, does not load (%v)", name, err)
	}
	names, err := stepCheckpoints(root)
	if err != nil {
		return nil, "", err
	}
	for _, n := range names {
		if n == tried {
			continue
		}
		rc, err := r.loadResumable(n)
		if errors.Is(err, errConfigChanged) {
			return nil, "", err
		}
		if err != nil {
			r.printf("warning: checkpoint %s does not load, skipped: %v\n", n, err)
			continue
		}
		r.printf("warning: %s; resuming from %s, the newest intact checkpoint\n", why, n)
		return rc, "", nil
	}
	return nil, why + "; no other checkpoint loads", nil
}

// readLimited reads at most n bytes of path.
func readLimited(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// stepCheckpoints lists the step checkpoints under root, newest (by phase, then step) first.
func stepCheckpoints(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type ck struct {
		name        string
		phase, step int
	}
	var cks []ck
	for _, e := range entries {
		if p, s, ok := parseStepName(e.Name()); ok && e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			cks = append(cks, ck{e.Name(), p, s})
		}
	}
	sort.Slice(cks, func(i, j int) bool {
		if cks[i].phase != cks[j].phase {
			return cks[i].phase > cks[j].phase
		}
		return cks[i].step > cks[j].step
	})
	names := make([]string, len(cks))
	for i, c := range cks {
		names[i] = c.name
	}
	return names, nil
}

// loadResumable loads checkpoint name of this run with its progress, which must fit the config.
func (r *Run) loadResumable(name string) (*resumable, error) {
	dir := r.checkpointDir(name)
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", dir)
	}
	ck, remote, err := r.loadCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if ck.State == nil {
		return nil, fmt.Errorf("checkpoint %s has no trainer state", name)
	}
	rc := &resumable{ck: ck, remote: remote}
	if err := json.Unmarshal(ck.State.Extra, &rc.state); err != nil {
		return nil, fmt.Errorf("checkpoint %s: trainer state: %w", name, err)
	}
	if err := r.checkBelongs(name, rc); err != nil {
		return nil, err
	}
	return rc, nil
}

// checkNothingRecorded refuses to start a run over when it has recorded training: a step's
// metrics or any trajectory. The evaluation before training (written before the first
// checkpoint) may be redone.
func (r *Run) checkNothingRecorded() error {
	if st, err := os.Stat(filepath.Join(r.Dir, "trajectories.atrs")); err == nil && st.Size() > traj.StreamHeaderLen {
		return fmt.Errorf("the run has recorded trajectories (%d bytes of trajectories.atrs): refusing to start it over on top of them; "+
			"start a new run, or restore a checkpoint (see README, \"When things go wrong\")", st.Size())
	}
	data, err := os.ReadFile(filepath.Join(r.Dir, "metrics.jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for line := range strings.Lines(string(data)) {
		if !strings.HasSuffix(line, "\n") {
			break // a torn last line
		}
		var m struct {
			Eval string `json:"eval"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Eval != "before" {
			return fmt.Errorf("the run has recorded training steps in metrics.jsonl: refusing to start it over on top of them; " +
				"start a new run, or restore a checkpoint (see README, \"When things go wrong\")")
		}
	}
	return nil
}

// cutFiles cuts metrics.jsonl and the trajectory stream back to what the checkpoint had seen
// (or removes their content when starting over): what the interrupted steps wrote goes.
// metrics.jsonl keeps every complete, well-formed line before the checkpoint's offset and
// nothing else (see cutMetrics). A trajectory stream longer than the offset is truncated there;
// a shorter one (damaged, or repaired) is left to traj.OpenFile, which cuts a torn tail.
func (r *Run) cutFiles() error {
	r.noteMissingLogs()
	if err := r.cutMetrics(filepath.Join(r.Dir, "metrics.jsonl"), r.state.MetricsOffset); err != nil {
		return fmt.Errorf("pipeline: resume: %w", err)
	}
	p := filepath.Join(r.Dir, "trajectories.atrs")
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("pipeline: resume: %w", err)
	case st.Size() > r.state.TrajOffset:
		if err := os.Truncate(p, r.state.TrajOffset); err != nil {
			return fmt.Errorf("pipeline: resume: cut trajectories.atrs back to %d bytes: %w", r.state.TrajOffset, err)
		}
	case st.Size() < r.state.TrajOffset:
		r.printf("warning: trajectories.atrs has %d bytes, fewer than the %d the checkpoint recorded: it was damaged or repaired; its intact records are kept\n",
			st.Size(), r.state.TrajOffset)
	}
	return nil
}

// cutMetrics cuts the metrics file at path back to off bytes, the length it had when the
// checkpoint was taken. Every complete line before off that is a JSON object is kept; a torn
// line (no newline: the file was cut short) or a line that is not JSON is dropped and reported,
// so appending never continues a half line. When nothing is wrong this is one truncation.
func (r *Run) cutMetrics(path string, off int64) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(f, off))
	f.Close()
	if err != nil {
		return fmt.Errorf("read metrics.jsonl: %w", err)
	}
	var keep []byte
	var dropped []string
	n := 0
	for line := range strings.Lines(string(data)) {
		n++
		switch {
		case !strings.HasSuffix(line, "\n"):
			dropped = append(dropped, fmt.Sprintf("line %d is torn (%d bytes, no newline)", n, len(line)))
		case !strings.HasPrefix(line, "{") || !json.Valid([]byte(line)):
			dropped = append(dropped, fmt.Sprintf("line %d is not a JSON object", n))
		default:
			keep = append(keep, line...)
		}
	}
	if int64(len(data)) < off {
		r.printf("warning: metrics.jsonl has %d bytes, fewer than the %d the checkpoint recorded: the lines it lost are not restored\n", len(data), off)
	}
	if len(dropped) == 0 {
		if err := os.Truncate(path, int64(len(data))); err != nil {
			return fmt.Errorf("cut metrics.jsonl back to %d bytes: %w", len(data), err)
		}
		return nil
	}
	r.printf("warning: metrics.jsonl: dropped %s; kept %d lines\n", strings.Join(dropped, ", "), n-len(dropped))
	if err := writeFileAtomic(path, keep); err != nil {
		return fmt.Errorf("rewrite metrics.jsonl: %w", err)
	}
	return nil
}

// loadRef loads the frozen reference policy saved when an RL phase started.
func (r *Run) loadRef(phase string) (*model.Model, error) {
	return checkpoint.LoadModel(r.checkpointDir(refName(phase)))
}

// loadCheckpoint loads checkpoint folder dir. One whose weights live on a Tinker service
// (checkpoint.SaveRemote) comes with the base model from init and the training state it names.
func (r *Run) loadCheckpoint(dir string) (*checkpoint.Checkpoint, *checkpoint.RemoteWeights, error) {
	rc, err := checkpoint.ReadRemote(dir)
	if err != nil {
		return nil, nil, err
	}
	if rc == nil {
		ck, err := checkpoint.Load(dir)
		return ck, nil, err
	}
	if !r.Cfg.Learner.Tinker() {
		return nil, nil, &checkpoint.RemoteWeightsError{Dir: dir, Weights: rc.Weights}
	}
	init, err := r.loadInit(context.Background())
	if err != nil {
		return nil, nil, err
	}
	return &checkpoint.Checkpoint{Model: init.Model, Tokenizer: rc.Tokenizer, State: rc.State}, &rc.Weights, nil
}
