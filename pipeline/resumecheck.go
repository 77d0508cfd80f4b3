package pipeline

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/traj"
)

// A run proves that a checkpoint is its own before resuming from it cuts anything: every
// checkpoint records the run's id (run.id in the run directory, made when the run is created),
// the configuration it was trained with and its own place in the run (phase and step, which its
// folder's name repeats). Resume refuses a checkpoint of another run, one renamed to another
// step, and a run whose config.yaml was edited since in a setting that changes what is trained.

// runIDFile holds the run's id, written once when the run is created.
const runIDFile = "run.id"

// newRunID is a fresh random run id.
func newRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeRunID gives the new run directory dir its id.
func writeRunID(dir string) (string, error) {
	id := newRunID()
	if err := writeFileAtomic(filepath.Join(dir, runIDFile), []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("pipeline: write %s: %w", runIDFile, err)
	}
	return id, nil
}

var runIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// readRunID reads the run directory's id; "" when the run predates run ids (no run.id).
func readRunID(dir string) (string, error) {
	data, err := readLimited(filepath.Join(dir, runIDFile), 256)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(data))
	if !runIDRE.MatchString(id) {
		return "", fmt.Errorf("%s holds %q, not a run id (32 hexadecimal digits)", runIDFile, clip(id, 64))
	}
	return id, nil
}

// configSHA256 is the hash of a configuration's YAML, which checkpoints record beside it.
func configSHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// errConfigChanged is a run whose config.yaml no longer describes what its checkpoints trained.
var errConfigChanged = errors.New("config changed")

// checkBelongs says whether the checkpoint loaded as rc (from folder name) is this run's and was
// trained with this run's configuration. A checkpoint of another run, or one whose progress is
// not the step its name says, is an error for this checkpoint alone (resuming tries an older
// one); a configuration that differs in a setting that is not safe to change wraps
// errConfigChanged (every checkpoint would refuse it).
func (r *Run) checkBelongs(name string, rc *resumable) error {
	s := rc.state
	switch {
	case s.RunID == "" && r.runID == "":
	case s.RunID == "":
		return fmt.Errorf("checkpoint %s records no run id: it is not of run %s (run.id %s)", name, r.Dir, r.runID)
	case r.runID == "":
		return fmt.Errorf("checkpoint %s is of run %s but %s is missing from the run directory: restore it, or resume from a copy of the run that has it", name, s.RunID, runIDFile)
	case s.RunID != r.runID:
		return fmt.Errorf("checkpoint %s is of another run (run id %s, this run's is %s)", name, s.RunID, r.runID)
	}
	if err := r.checkConfig(name, rc); err != nil {
		return err
	}
	ph := r.Cfg.Phases
	if s.Phase < 0 || s.Phase > len(ph) || s.Step < 0 || s.MetricsOffset < 0 || s.TrajOffset < 0 ||
		s.Phase < len(ph) && s.Step > ph[s.Phase].Steps {
		return fmt.Errorf("checkpoint %s is at phase %d step %d, which this run's %d phases do not have", name, s.Phase, s.Step, len(ph))
	}
	p, st, ok := parseStepName(name)
	named := ok && p < len(ph) && name == r.stepName(p, st)
	if !named || !(s.Phase == p && s.Step == st || s.Phase == p+1 && s.Step == 0 && st == ph[p].Steps) {
		return fmt.Errorf("checkpoint %s records phase %d step %d, not the step its name says: it was renamed or copied from elsewhere", name, s.Phase, s.Step)
	}
	return nil
}

// checkConfig compares the model checkpoint name holds, and the configuration it records, with
// the run's config.yaml.
func (r *Run) checkConfig(name string, rc *resumable) error {
	s := rc.state
	if s.Config == "" {
		// A checkpoint written before checkpoints recorded their configuration: its model at least
		// must be the one the config describes.
		if want := r.Cfg.ModelConfig(rc.ck.Tokenizer.VocabSize()); rc.ck.Model.Cfg != want {
			return fmt.Errorf("checkpoint %s holds model %+v; config.yaml describes %+v", name, rc.ck.Model.Cfg, want)
		}
		return nil
	}
	if s.ConfigSHA256 != configSHA256([]byte(s.Config)) {
		return fmt.Errorf("checkpoint %s: its recorded configuration does not match its hash", name)
	}
	cur, err := config.Encode(r.Cfg)
	if err != nil {
		return err
	}
	if string(cur) == s.Config {
		if want := r.Cfg.ModelConfig(rc.ck.Tokenizer.VocabSize()); rc.ck.Model.Cfg != want {
			return fmt.Errorf("checkpoint %s holds model %+v, not the %+v its configuration describes", name, rc.ck.Model.Cfg, want)
		}
		return nil
	}
	diffs, err := configDiff([]byte(s.Config), cur)
	if err != nil {
		return fmt.Errorf("checkpoint %s: compare configurations: %w", name, err)
	}
	var unsafe []string
	for _, d := range diffs {
		if !resumeSafeKey(d.path) {
			unsafe = append(unsafe, d.String())
		}
	}
	if len(unsafe) > 0 {
		return fmt.Errorf("%w: config.yaml differs from the configuration checkpoint %s was trained with: %s; "+
			"a resumed run trains with the configuration it started with (only %s may change): put those settings back, or start a new run (--init %s)",
			errConfigChanged, name, strings.Join(unsafe, "; "), strings.Join(resumeSafeKeys, ", "), r.checkpointDir(name))
	}
	return nil
}

// resumeSafeKeys are the settings a resumed run may change in its config.yaml: where the run
// lives, how many checkpoints it keeps, the start checkpoint (read only by a fresh start) and
// how the workers' data plane is reached and waited for. Every other setting changes what the
// remaining steps train or what the recorded ones meant.
var resumeSafeKeys = []string{
	"name", "runs_dir", "init", "checkpoint.keep",
	"phases[*].rl.async.workers.{listen,url,token,nkey,worker_nkeys,task_ack_wait,group_timeout}",
}

var resumeSafeRE = regexp.MustCompile(`^(name|runs_dir|init|checkpoint\.keep|phases\[\d+\]\.rl\.async\.workers\.(listen|url|token|nkey|worker_nkeys|task_ack_wait|group_timeout))(\[\d+\])?$`)

func resumeSafeKey(path string) bool { return resumeSafeRE.MatchString(path) }

// configChange is one setting that differs between two configurations.
type configChange struct {
	path     string
	old, new any // nil when absent
}

func (c configChange) String() string {
	show := func(v any) string {
		if v == nil {
			return "(absent)"
		}
		b, err := yaml.MarshalWithOptions(v, yaml.Flow(true))
		if err != nil {
			return fmt.Sprint(v)
		}
		return clip(strings.TrimSpace(string(b)), 80)
	}
	return fmt.Sprintf("%s was %s, is %s", c.path, show(c.old), show(c.new))
}

// configDiff lists the settings that differ between two configurations' YAML, by path
// (phases[1].steps), sorted.
func configDiff(a, b []byte) ([]configChange, error) {
	var va, vb any
	if err := yaml.Unmarshal(a, &va); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &vb); err != nil {
		return nil, err
	}
	var out []configChange
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		mx, okx := x.(map[string]any)
		my, oky := y.(map[string]any)
		if okx && oky {
			keys := map[string]bool{}
			for k := range mx {
				keys[k] = true
			}
			for k := range my {
				keys[k] = true
			}
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range keys {
					if !yield(k) {
						return
					}
				}
			}) {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, mx[k], my[k])
			}
			return
		}
		lx, okx := x.([]any)
		ly, oky := y.([]any)
		if okx && oky && len(lx) == len(ly) {
			for i := range lx {
				walk(fmt.Sprintf("%s[%d]", path, i), lx[i], ly[i])
			}
			return
		}
		if !reflect.DeepEqual(x, y) {
			out = append(out, configChange{path: path, old: x, new: y})
		}
	}
	walk("", va, vb)
	sort.SliceStable(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// resumeChecked is resume with the run's id read first; a run made before run ids gets one now,
// which the checkpoints it writes from here on record.
func (r *Run) resumeChecked() (*Run, error) {
	id, err := readRunID(r.Dir)
	if err != nil {
		return nil, err
	}
	r.runID = id
	run, err := r.resume()
	if err != nil || r.runID != "" {
		return run, err
	}
	if r.runID, err = writeRunID(r.Dir); err != nil {
		return nil, err
	}
	return run, nil
}

// noteMissingLogs warns when resuming finds metrics.jsonl or trajectories.atrs gone although the
// checkpoint had seen them written: the run continues in new files, without what they held.
func (r *Run) noteMissingLogs() {
	for _, f := range []struct {
		name string
		off  int64
		min  int64
	}{{"metrics.jsonl", r.state.MetricsOffset, 0}, {"trajectories.atrs", r.state.TrajOffset, traj.StreamHeaderLen}} {
		if _, err := os.Stat(filepath.Join(r.Dir, f.name)); errors.Is(err, os.ErrNotExist) && f.off > f.min {
			r.printf("warning: %s is missing, though the checkpoint had seen %d bytes of it written: what it held before the checkpoint is lost; the run continues in a new one\n", f.name, f.off)
		}
	}
}
