// Package pipeline runs training: it turns a Config into a run directory and drives its phases —
// supervised cold start on expert demonstrations, then RL — through the rollout loop, the local
// inference engine and the learner, measuring the loop's three invariants every step. This file
// holds the run itself; sft.go, rl.go and eval.go hold the phases and evaluation.
//
// Every random choice of a step is derived from (seed, phase, step), so a run resumed from a
// checkpoint makes exactly the choices the uninterrupted run made.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/mcp"
	"github.com/agentrl/agentrl/hub"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// Options are the run's non-config settings.
type Options struct {
	// Out receives progress and summaries.
	Out io.Writer
	// Terminal draws progress bars on Out instead of log lines.
	Terminal bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Envs holds the environments the config names (all.Builtins for the built-in ones).
	Envs *env.Registry
	// NewConversation renders the RL episodes' chat (rollout.Runner.NewConversation); nil means
	// the tokenizer's ChatML, which never splits an episode into samples.
	NewConversation func() rollout.Conversation
	// StopRL, when set, is called after each RL step but a phase's last, once its metrics line
	// is written (line) and its checkpoint, if one is due, saved; true ends the run there: Train returns ErrStopped, and
	// the run's directory holds what was done (a bench stops an arm at a budget this way).
	StopRL func(phase string, step int, line map[string]any) bool
}

// ErrStopped is what Train returns when Options.StopRL ended the run.
var ErrStopped = errors.New("pipeline: run stopped by Options.StopRL")

// Run is one training run and its directory.
type Run struct {
	Cfg  config.Config
	Dir  string
	opts Options

	tok     *tokenizer.Tokenizer
	model   *model.Model
	version int32

	metrics *metricsFile
	trajs   *traj.Writer
	evals   []EvalReport
	start   time.Time

	state       progressState
	resuming    bool         // opened by Resume
	restored    bool         // a checkpoint was loaded
	restoredOpt *optim.State // optimizer state of the phase in progress

	lastRL map[string]any // the last RL step's metrics line (for Options.StopRL)

	mcp *mcp.Toolbox // the MCP servers of Cfg.MCP, connected while Train runs
	// rewards are the reward blocks' shapers and their judges, built at first use while Train runs.
	rewards *rewardShapers
	// act holds the monitor's actions in the RL phase in progress (monitor_actions.go; nil when
	// none is on).
	act *monitor.Actions
	// dist is the data plane of rl.async.workers, from the first phase that uses it to the end
	// of Train.
	dist        *distSession
	onDistClose func(*dist.Consumer)    // tests: sees the data plane's consumer before it closes
	onDistStep  func(*distSession, int) // tests: called after each distributed step is logged

	runID string // the run's id (run.id; "" for a run made before run ids)
	// prompts are the environments' system prompts in training, recorded in checkpoints
	// (promptrecord.go).
	prompts map[string]string
	chat    ChatRendering // the chat block resolved for the tokenizer (chat.go)
	// toolFormat is the template's tool-call format when the environments' tool wrappers must
	// speak it (not Hermes); nil otherwise.
	toolFormat tool.CallFormat
	chatTools  []json.RawMessage // the environments' tool schemas the template is given

	unlock func() // releases the run directory's lock (LockRun), taken by NewRun or Resume

	learner *learnerSession // the external learner of the RL phase in progress (learner.go)
	// tinker is the run's Tinker service (learner.backend tinker, tinker.go), open while Train
	// runs; remoteFrom is the training state on it that a resumed run loads.
	tinker     *tinkerSession
	remoteFrom *checkpoint.RemoteWeights
}

// Summary is what a finished run reports.
type Summary struct {
	Dir   string
	Evals []EvalReport // in order: before training, then after each phase
}

func (r *Run) now() time.Time {
	if r.opts.Now != nil {
		return r.opts.Now()
	}
	return time.Now()
}

func (r *Run) printf(format string, a ...any) {
	if r.opts.Out != nil {
		fmt.Fprintf(r.opts.Out, format, a...)
	}
}

// NewRun creates a fresh run directory under cfg.RunsDir named after cfg.Name (with a numeric
// suffix when that name is taken) and writes the resolved config into it.
func NewRun(cfg config.Config, opts Options) (*Run, error) {
	if cfg.Init != "" && !hub.IsRef(cfg.Init) {
		// Saved absolute, so that the run's config means the same from any directory.
		abs, err := filepath.Abs(cfg.Init)
		if err != nil {
			return nil, fmt.Errorf("pipeline: init: %w", err)
		}
		cfg.Init = abs
	}
	if err := cfg.Validate(opts.Envs); err != nil {
		return nil, err
	}
	// The model is init's architecture, in the config.yaml written below (initmodel.go).
	if err := TakeInitModel(context.Background(), &cfg, opts.Envs, opts.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunsDir, 0o755); err != nil {
		return nil, fmt.Errorf("pipeline: create runs dir: %w", err)
	}
	dir := filepath.Join(cfg.RunsDir, cfg.Name)
	for i := 2; ; i++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("pipeline: create run dir: %w", err)
		}
		dir = filepath.Join(cfg.RunsDir, fmt.Sprintf("%s-%d", cfg.Name, i))
	}
	unlock, err := LockRun(dir)
	if err != nil {
		return nil, err
	}
	data, err := config.Encode(cfg)
	if err != nil {
		unlock()
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, "config.yaml"), data); err != nil {
		unlock()
		return nil, err
	}
	id, err := writeRunID(dir)
	if err != nil {
		unlock()
		return nil, err
	}
	return &Run{Cfg: cfg, Dir: dir, opts: opts, unlock: unlock, runID: id}, nil
}

// Close releases the run directory's lock, which NewRun and Resume take and Train releases when
// it returns; it is for a Run that is not trained. Calling it again does nothing.
func (r *Run) Close() {
	if r.unlock != nil {
		r.unlock()
		r.unlock = nil
	}
}

// envFactory makes the episodes' environments: the registry's, with the MCP tools attached.
func (r *Run) envFactory() rollout.EnvFactory {
	f := r.opts.Envs.New
	if mf := r.mcp.Factory(); mf != nil {
		f = mf
	}
	if r.toolFormat == nil {
		return f
	}
	return func(name string) (env.Env, error) {
		e, err := f(name)
		return r.withToolFormat(e), err
	}
}

// stepRNG is the random source of one step of one phase (or of phase setup with step -1).
func (r *Run) stepRNG(phase, step int, salt uint64) *rand.Rand {
	return rand.New(r.stepSource(phase, step, salt))
}

// stepSource is the source of stepRNG, whose state can be saved and restored.
func (r *Run) stepSource(phase, step int, salt uint64) *rand.PCG {
	return rand.NewPCG(r.Cfg.Seed^0x9E3779B97F4A7C15*uint64(phase+1), uint64(step+1)<<20^salt)
}

// buildTokenizer trains the run's tokenizer on text from every environment of the run.
func (r *Run) buildTokenizer() error {
	var corpus []string
	for _, name := range r.Cfg.EnvNames() {
		spec, err := r.opts.Envs.Lookup(name)
		if err != nil {
			return err
		}
		corpus = append(corpus, spec.Corpus(r.Cfg.Tokenizer.CorpusSamples)...)
		// Attached MCP tools are described in every episode's system prompt: weigh their
		// descriptions as one sample per episode so their words become tokens too.
		if tools := r.mcp.Tools(name); len(tools) > 0 {
			desc := env.DescribeTools(tools)
			for range r.Cfg.Tokenizer.CorpusSamples {
				corpus = append(corpus, desc)
			}
		}
	}
	demos, err := r.demoCorpus()
	if err != nil {
		return err
	}
	corpus = append(corpus, demos...)
	tok, err := tokenizer.Train(corpus, tokenizer.DefaultTrainOptions(r.Cfg.Tokenizer.VocabSize))
	if err != nil {
		return fmt.Errorf("pipeline: train tokenizer: %w", err)
	}
	r.tok = tok
	return tok.Save(filepath.Join(r.Dir, "tokenizer"))
}

// train runs the phases (Train, remote.go, opens the remote environments first).
func (r *Run) train(ctx context.Context) (*Summary, error) {
	defer r.Close()
	r.start = r.now()
	// MCP servers first: one that does not start fails the run before any work. They stay
	// connected, shared by every episode, until Train returns however it returns.
	tools, err := mcp.Connect(ctx, r.opts.Envs, r.Cfg.MCP, r.Cfg.EnvNames()...)
	if err != nil {
		return nil, err
	}
	r.mcp = tools
	defer func() {
		if err := tools.Close(); err != nil {
			r.printf("warning: %v\n", err)
		}
		r.mcp = nil
	}()
	r.rewards = &rewardShapers{}
	defer func() {
		if err := r.rewards.close(); err != nil {
			r.printf("warning: reward judges: %v\n", err)
		}
	}()
	if d := tools.Describe(); d != "" {
		r.printf("%s\n", d)
	}
	if r.resuming {
		if err := r.cutFiles(); err != nil {
			return nil, err
		}
	}
	if !r.restored {
		r.state = progressState{Best: -1}
		if err := r.initModel(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.setupChat(); err != nil {
		return nil, err
	}
	if r.Cfg.Learner.Tinker() {
		r.printf("run %s: model %s on the Tinker service (its weights are not loaded here), vocabulary %d\n", r.Dir, r.Cfg.Learner.BaseModel, r.tok.VocabSize())
	} else {
		r.printf("run %s: model %.2fM parameters, vocabulary %d\n", r.Dir, float64(r.model.NumParams())/1e6, r.tok.VocabSize())
	}
	if d := r.Cfg.DescribePrecision(); d != "" {
		r.printf("%s\n", d)
	}
	for _, p := range r.Cfg.Phases {
		if d := simulatedLatency(p.Envs); d != "" {
			r.printf("phase %s: environment steps wait a SIMULATED latency (a benchmark workload): %s\n", p.Name, d)
		}
		if d := config.DescribeDifficulty(p.Envs); d != "" {
			r.printf("phase %s: tasks drawn by difficulty: %s\n", p.Name, d)
		}
	}
	if err := r.checkPrompts(ctx); err != nil {
		return nil, err
	}
	if r.prompts, err = r.trainingPrompts(ctx); err != nil {
		return nil, err
	}
	if err := r.openLogs(); err != nil {
		return nil, err
	}
	defer r.closeLogs()
	defer func() {
		r.dist.close()
		r.dist = nil
	}()

	if r.Cfg.Learner.Tinker() {
		if err := r.openTinker(ctx, r.remoteFrom); err != nil { // tinker.go
			return nil, err
		}
		defer func() { r.tinker.close(); r.tinker = nil }()
	}
	if r.restored {
		r.printf("resuming at phase %d step %d (policy version %d)\n", r.state.Phase, r.state.Step, r.version)
	} else {
		if err := r.evaluate(ctx, "before"); err != nil {
			return nil, err
		}
		if err := r.saveCheckpoint(nil, r.stepName(0, 0)); err != nil {
			return nil, err
		}
	}
	for pi := r.state.Phase; pi < len(r.Cfg.Phases); pi++ {
		p := r.Cfg.Phases[pi]
		start := r.state.Step
		var err error
		switch p.Kind {
		case "sft":
			err = r.runSFT(ctx, pi, p, start)
		case "rl", "distill":
			err = r.runRL(ctx, pi, p, start)
		}
		if err != nil {
			return nil, fmt.Errorf("phase %s: %w", p.Name, err)
		}
		if err := r.evaluate(ctx, "after-"+p.Name); err != nil {
			return nil, err
		}
		r.state.Phase, r.state.Step = pi+1, 0
		r.restoredOpt = nil
		if err := r.saveCheckpoint(nil, r.stepName(pi, p.Steps)); err != nil {
			return nil, err
		}
		if err := r.dist.checkpointed(ctx); err != nil {
			return nil, err
		}
	}
	r.dist.finish(ctx)
	r.printSummary()
	return &Summary{Dir: r.Dir, Evals: r.evals}, nil
}

// initModel makes the run's tokenizer and model: trained and initialized afresh, or loaded
// from the checkpoint named by Init.
func (r *Run) initModel(ctx context.Context) error {
	if r.Cfg.Init == "" {
		if err := r.buildTokenizer(); err != nil {
			return err
		}
		mc := r.Cfg.ModelConfig(r.tok.VocabSize())
		if err := mc.Validate(); err != nil {
			return err
		}
		if err := r.checkMemory(mc); err != nil { // before the model is allocated
			return err
		}
		m, err := model.New(mc, r.Cfg.Seed)
		r.model = m
		return err
	}
	ck, err := r.loadInit(ctx)
	if err != nil {
		return err
	}
	r.model, r.tok = ck.Model, ck.Tokenizer
	return r.tok.Save(filepath.Join(r.Dir, "tokenizer"))
}

// loadInit loads the checkpoint named by Init, checked against the run's model block.
func (r *Run) loadInit(ctx context.Context) (*checkpoint.Checkpoint, error) {
	dir, err := hub.Resolve(ctx, r.Cfg.Init, hub.Checkpoint, r.opts.Out) // a folder as it is
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if r.Cfg.Learner.Tinker() {
		return r.tinkerBase(dir) // tinker.go: the weights stay on the service
	}
	mc, err := checkpoint.ReadConfig(dir) // the memory is checked before the weights load
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if err := r.checkMemory(mc); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	// The model block is the checkpoint's config.json as NewRun read it (TakeInitModel); the
	// vocabulary is the checkpoint's embedding rows, which may pad the tokenizer's ids.
	if want := r.Cfg.ModelConfig(ck.Model.Cfg.Vocab); ck.Model.Cfg != want {
		return nil, fmt.Errorf("init: checkpoint %s has model %+v; the config describes %+v (did config.json change since the run started?)", r.Cfg.Init, ck.Model.Cfg, want)
	}
	return ck, nil
}

// newLearner makes the phase's learner, restoring the optimizer when resuming mid-phase.
func (r *Run) newLearner(p config.Phase, start int) (*learn.Learner, error) {
	if r.Cfg.Learner.Tinker() {
		return r.newTinkerLearner(p, start) // tinker.go
	}
	if err := r.setAdapters(p, start); err != nil {
		return nil, err
	}
	l, err := learn.New(r.model, p.Optim, p.Steps, r.Cfg.Rollout.MaxContext)
	if err != nil {
		return nil, err
	}
	if start > 0 {
		if r.restoredOpt == nil {
			return nil, fmt.Errorf("resuming at step %d without optimizer state", start)
		}
		if err := l.Opt.LoadState(*r.restoredOpt); err != nil {
			return nil, err
		}
		l.Step = start
	}
	return l, nil
}

// setAdapters gives the model what phase p trains: with a lora block, adapters of that
// configuration (fresh ones at the phase's start, earlier ones merged into the weights first;
// the checkpoint's when resuming mid-phase), and without one, the weights themselves (earlier
// adapters merged).
func (r *Run) setAdapters(p config.Phase, start int) error {
	m := r.model
	if p.LoRA == nil || start == 0 {
		m.MergeLoRA()
	}
	if p.LoRA == nil {
		return nil
	}
	if start > 0 {
		if !m.HasLoRA() {
			return fmt.Errorf("resuming phase %s at step %d: the checkpoint has no adapters", p.Name, start)
		}
		return nil
	}
	return m.AddLoRA(*p.LoRA, r.Cfg.Seed^uint64(len(p.Name))<<32^uint64(p.Steps))
}

// afterStep checkpoints when one is due after step (0-based) of phase pi.
func (r *Run) afterStep(l *learn.Learner, pi, step int) error {
	done := step + 1
	if done%r.Cfg.Checkpoint.Every != 0 || done == r.Cfg.Phases[pi].Steps {
		return nil // the phase end is checkpointed after its evaluation
	}
	r.state.Phase, r.state.Step = pi, done
	return r.saveCheckpoint(l, r.stepName(pi, done))
}

// noteEval keeps the best policy so far as checkpoints/best. Among policies that all score 0 the
// latest is kept: the untrained model is never "best" of a run that measured nothing better.
func (r *Run) noteEval(rep EvalReport) error {
	var sum float64
	for _, e := range rep.Envs {
		sum += *e.Pass1Sampled
	}
	score := sum / float64(max(len(rep.Envs), 1))
	if score < r.state.Best || score == r.state.Best && score > 0 {
		return nil
	}
	r.state.Best = score
	if r.tinker != nil { // the sampler weights of the version evaluated, on the service
		if err := r.saveTinkerCheckpoint(r.checkpointDir(bestName), bestName, nil, false); err != nil {
			return err
		}
	} else if err := checkpoint.Save(r.checkpointDir(bestName), r.model, r.tok, nil); err != nil {
		return err
	}
	return r.recordPrompts(r.checkpointDir(bestName))
}

func (r *Run) openLogs() error {
	mf, err := openMetrics(filepath.Join(r.Dir, "metrics.jsonl"))
	if err != nil {
		return err
	}
	r.metrics = mf
	tw, _, err := traj.OpenFile(filepath.Join(r.Dir, "trajectories.atrs"), traj.WriterOptions{Compression: traj.CompressZstd})
	if err != nil {
		mf.Close()
		if errors.Is(err, traj.ErrCorrupt) {
			// Resuming has already cut the file back to the checkpoint, so a repair now keeps
			// exactly the intact records the checkpoint covers.
			return fmt.Errorf("%w\nthe trajectory file is damaged before its end: 'agentrl traj repair %s' rewrites it with only its intact records (keeping the original as trajectories.atrs.damaged); then resume again", err, r.Dir)
		}
		return err
	}
	r.trajs = tw
	return nil
}

func (r *Run) closeLogs() {
	if r.trajs != nil {
		r.trajs.Close()
	}
	if r.metrics != nil {
		r.metrics.Close()
	}
}

// record appends trajectories to the run's stream, tagged with where they came from.
func (r *Run) record(phase string, step int, ts []*traj.Trajectory) error {
	for _, t := range ts {
		t.Meta = append(t.Meta, traj.KV{Key: "phase", Value: phase}, traj.KV{Key: "step", Value: fmt.Sprint(step)})
		if err := r.trajs.Write(t); err != nil {
			return err
		}
	}
	return nil
}

// metricsFile appends one JSON object per line; each line is written whole.
type metricsFile struct {
	f *os.File
}

func openMetrics(path string) (*metricsFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pipeline: open metrics: %w", err)
	}
	return &metricsFile{f: f}, nil
}

func (m *metricsFile) Write(v map[string]any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("pipeline: encode metrics: %w", err)
	}
	_, err = m.f.Write(append(line, '\n'))
	return err
}

func (m *metricsFile) Close() error { return m.f.Close() }

// writeFileAtomic writes data to path through a temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
