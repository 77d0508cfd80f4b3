package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/dataset"
	"github.com/agentrl/agentrl/env/mcp"
	envremote "github.com/agentrl/agentrl/env/remote"
	"github.com/agentrl/agentrl/eval"
	"github.com/agentrl/agentrl/hub"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/rollout"
)

// Config is a whole training run: the model, the tokenizer, how episodes run, and a list of
// phases (supervised cold start, then RL on one environment or a weighted mix). It is saved in
// the run directory and in every checkpoint. Unknown keys, and settings that would do nothing
// in the configuration they appear in, are errors.
type Config struct {
	Name    string `yaml:"name"`
	Seed    uint64 `yaml:"seed"`
	RunsDir string `yaml:"runs_dir"`
	// Init starts the run from a checkpoint's weights and tokenizer instead of a fresh model
	// (e.g. RL from an earlier run's supervised checkpoint); the model block may be absent and
	// is then the checkpoint's architecture (TakeModel, initmodel.go), and a setting it names
	// must agree with the checkpoint. hf:ORG/NAME[@REVISION] names a model on the Hugging Face
	// Hub, downloaded into the huggingface_hub cache when the run starts (package hub,
	// docs/hub.md).
	Init       string           `yaml:"init,omitempty"`
	Model      model.Config     `yaml:"model"` // the vocabulary comes from the tokenizer
	Tokenizer  TokenizerConfig  `yaml:"tokenizer"`
	Rollout    RolloutConfig    `yaml:"rollout"`
	Phases     []Phase          `yaml:"phases"`
	Eval       EvalConfig       `yaml:"eval"`
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
	Monitor    MonitorConfig    `yaml:"monitor"`
	// MCP attaches the tools of MCP servers to environments (none when absent).
	MCP *mcp.Config `yaml:"mcp,omitempty"`
	// Learner is the learner RL phases train through (absent: the built-in model in-process).
	Learner learn.BackendConfig `yaml:"learner,omitzero"`
	// Chat chooses the chat template and tool-call format episodes are rendered with (chat.go;
	// absent: template auto, tool_format auto).
	Chat *ChatConfig `yaml:"chat,omitempty"`
	// Limits bounds what the run may take of the machine (limits.go; absent: its memory alone).
	Limits *LimitsConfig `yaml:"limits,omitempty"`

	modelTaken bool            // the model block is init's architecture (TakeModel)
	modelNamed map[string]bool // with init, the model settings the file or --set named (initmodel.go)
}

// TokenizerConfig says how the run's tokenizer is trained from the environments' text.
type TokenizerConfig struct {
	VocabSize     int `yaml:"vocab_size"`
	CorpusSamples int `yaml:"corpus_samples"` // samples of text per environment
}

// RolloutConfig bounds episodes (rollout's own settings, sampling among them) and sizes the
// inference engine.
type RolloutConfig struct {
	rollout.Config `yaml:",inline"`
	// EngineSlots is the continuous batch of the local engine; also the episode concurrency.
	EngineSlots int `yaml:"engine_slots"`
	// Generator makes RL phases sample on inference servers (absent: the local engine). The
	// trainer publishes its weights to them at the start of an RL phase and after every update;
	// evaluation stays in-process.
	Generator *remote.Config `yaml:"generator,omitempty"`
	// Precision is the number formats the in-process engine samples RL episodes in: of the
	// weights and of the KV cache, f32 (the default, what the learner computes) or bf16
	// (precision.go).
	Precision *model.DecodePrecision `yaml:"precision,omitempty"`
}

// EnvWeight is one environment of a phase's mix.
type EnvWeight struct {
	Name   string  `yaml:"name"`
	Weight float64 `yaml:"weight"`
	// Latency, in an rl phase, adds a simulated heavy-tailed latency to every step of this
	// environment's training episodes (env.WithLatency; a benchmark workload, not evaluation's).
	Latency *env.LatencyConfig `yaml:"latency,omitempty"`
	// Reward, in an rl phase, rescores this environment's episodes (reward.go; absent: the
	// environment's own reward).
	Reward *RewardConfig `yaml:"reward,omitempty"`
	// Difficulty draws this environment's tasks at its difficulty levels (env.Difficulty;
	// absent: its default tasks). Evaluation then reports success per level (difficulty.go).
	Difficulty *env.Difficulty `yaml:"difficulty,omitempty"`
	// Remote defines this environment as one served over HTTP (env/remote's protocol,
	// docs/env-protocol.md) by the servers it names; the name is the run's own for it.
	Remote *envremote.PoolConfig `yaml:"remote,omitempty"`
	// Tasks defines this environment as a file of tasks with reference answers (env/dataset).
	Tasks *dataset.Config `yaml:"tasks,omitempty"`
}

// Phase is one stage of a run.
type Phase struct {
	Name  string       `yaml:"name"`
	Kind  string       `yaml:"kind"` // "sft", "rl" or "distill" (an rl phase trained on rl.distill's teacher alone)
	Envs  []EnvWeight  `yaml:"envs"`
	Steps int          `yaml:"steps"`
	Optim learn.Config `yaml:"optim"`
	SFT   *SFTConfig   `yaml:"sft,omitempty"`
	RL    *RLConfig    `yaml:"rl,omitempty"`
	// LoRA trains low-rank adapters beside the frozen weights instead of the weights
	// (model.LoRAConfig); a phase without it trains the weights, with earlier adapters merged.
	LoRA *model.LoRAConfig `yaml:"lora,omitempty"`
}

// SFTConfig is supervised training on demonstrations synthesized by each environment's noisy
// expert; the loss covers assistant tokens only.
type SFTConfig struct {
	Demos     int     `yaml:"demos,omitempty"` // demonstrations synthesized for the phase
	Noise     float64 `yaml:"noise,omitempty"` // how often the expert errs or skips a tool, in [0, 1]
	BatchSize int     `yaml:"batch_size"`      // demonstrations per update
	// Keep is "all" (train on every demonstration, right or wrong) or "successful".
	Keep string `yaml:"keep,omitempty"`
	// Data is a file of demonstrations the phase trains on instead of the experts' (demos, noise
	// and keep are then not set): JSONL, one conversation a line in OpenAI's chat format
	// ({"messages": [...], "tools": [...]}, assistant tool_calls answered by tool messages),
	// rendered as the agent loop renders the same conversation (sftdata.go). A relative path is
	// relative to the configuration file's folder.
	Data string `yaml:"data,omitempty"`
	// BadRows is what a row of data that cannot be trained on does: refuse (the default: the
	// run stops, naming its line and why) or drop (left out and counted by reason).
	BadRows string `yaml:"bad_rows,omitempty"`
	// Overlong is what a row longer than rollout.max_context does: refuse (the default: a bad
	// row, as bad_rows says) or truncate (its whole assistant turns that fit are kept).
	Overlong string `yaml:"overlong,omitempty"`
	// Curriculum, when positive, is sequence-length warmup over that many steps: step s trains on
	// each demonstration's prefix (whole turns) of at most max_context·(1/4 + 3/4·s/Curriculum)
	// tokens, so the lookups a long episode needs first form where fewer tokens dilute attention.
	Curriculum int `yaml:"curriculum,omitempty"`
}

// RLConfig is on-policy RL: groups of episodes per task, advantages, a policy loss.
type RLConfig struct {
	GroupsPerStep int                  `yaml:"groups_per_step"`
	GroupSize     int                  `yaml:"group_size"`
	Epochs        int                  `yaml:"epochs"`
	Minibatches   int                  `yaml:"minibatches"`
	Advantage     algo.AdvantageConfig `yaml:"advantage"`
	Loss          algo.LossConfig      `yaml:"loss"`
	// KLPenalty charges the KL to the phase's frozen start as a per-token reward before
	// advantages are estimated, with a fixed or adaptive coefficient (absent: none).
	KLPenalty *algo.KLPenaltyConfig `yaml:"kl_penalty,omitempty"`
	// DynamicSampling drops zero-variance groups and samples more to fill the step (DAPO).
	DynamicSampling *DynamicSamplingConfig `yaml:"dynamic_sampling,omitempty"`
	// TrainToolResponses puts the tool-response tokens in the loss besides the policy's own: the
	// ablation of Search-R1's retrieved-token masking (arXiv 2503.09516), for measuring it. The
	// tokens take the sequence's advantage; their behaviour logprob is the proximal one, so the
	// step's shift metrics count them with weight 1. Entropy is still the policy's tokens'.
	TrainToolResponses bool `yaml:"train_tool_responses"`
	// AllowSamplingMismatch must be set when rollout sampling (temperature ≠ 1, top-k, top-p)
	// makes the behaviour distribution differ from what the learner recomputes.
	AllowSamplingMismatch bool `yaml:"allow_sampling_mismatch"`
	// Async runs generation ahead of the learner (absent: synchronous steps).
	Async *AsyncConfig `yaml:"async,omitempty"`
	// Distill trains on the per-token reverse KL to a teacher (distill.go; absent: none).
	Distill *DistillConfig `yaml:"distill,omitempty"`
}

// DynamicSamplingConfig bounds the extra sampling.
type DynamicSamplingConfig struct {
	// MaxRounds is how many rounds of groups_per_step groups may be sampled for one step; when
	// they do not fill it, the step trains on the partial batch and says so in its metrics.
	MaxRounds int `yaml:"max_rounds"`
}

// EvalConfig is held-out evaluation.
type EvalConfig struct {
	Tasks int `yaml:"tasks"` // held-out tasks per environment
	// Samples per task at temperature 1 for the sampled pass@1 (the policy RL trains); greedy
	// pass@1 is always reported too.
	Samples int `yaml:"samples"`
	Every   int `yaml:"every"` // RL steps between periodic evaluations; 0 = only before and after phases
}

// CheckpointConfig says how often to checkpoint and how many to keep.
type CheckpointConfig struct {
	Every int `yaml:"every"` // steps between checkpoints (and at every phase end)
	Keep  int `yaml:"keep"`  // most recent checkpoints kept, besides the best
}

// Limits of the sizes a run's configuration may give, checked by Validate before any work:
// with the model's (model.MaxParams and its sizes), the engine's (local.MaxSlots,
// local.MaxCacheBytes) and an evaluation's (eval.MaxTasks, eval.MaxK, eval.MaxEpisodeTokens),
// they bound what a run allocates. A token kept in memory (an episode's or a demonstration's)
// takes about 14 bytes.
const (
	MaxCorpusSamples = 1_000_000 // tokenizer.corpus_samples, per environment
	MaxDemos         = 1_000_000 // sft.demos
	MaxDemoTokens    = 1 << 27   // sft.demos × rollout.max_context: under 2 GiB of demonstrations
	MaxGroupsPerStep = 4096      // rl.groups_per_step
	MaxGroupSize     = 1024      // rl.group_size
	MaxEpochs        = 1000      // rl.epochs
	MaxRounds        = 100       // rl.dynamic_sampling.max_rounds
	MaxStepTokens    = 1 << 26   // episodes sampled for one RL step × their samples' tokens (rollout.Config.MaxEpisodeTokens): under 1 GiB
	// MaxBatchTokens bounds one update's tokens (sft.batch_size, or an RL minibatch, ×
	// rollout.max_context), and MaxActivationBytes the activations the model keeps for them.
	MaxBatchTokens     = 1 << 20
	MaxActivationBytes = 8 << 30
)

// DefaultTokenizer is the presets' tokenizer: 512 tokens trained on 2,000 samples of each
// environment's text.
func DefaultTokenizer() TokenizerConfig { return TokenizerConfig{VocabSize: 512, CorpusSamples: 2000} }

// episodeTokens names the tokens one episode can keep (rollout.Config.MaxEpisodeTokens) for
// an error message: rollout.max_context, or with folding or delegation the sum over the
// samples they add.
func (c *Config) episodeTokens() string {
	r := c.Rollout
	if r.Context == nil && r.Delegate == nil {
		return fmt.Sprintf("rollout.max_context %d", r.MaxContext)
	}
	return fmt.Sprintf("%d tokens an episode (rollout.max_context %d for each of its samples, the folds' and the sub-episodes' counted: rollout.context, rollout.delegate)", r.MaxEpisodeTokens(), r.MaxContext)
}

// checkBatch refuses an update of n sequences of up to rollout.max_context tokens whose tokens
// or activations exceed MaxBatchTokens or MaxActivationBytes; what names the setting.
func (c *Config) checkBatch(what string, n int) error {
	ctx := c.Rollout.MaxContext
	toks := int64(n) * int64(ctx)
	if toks > MaxBatchTokens {
		return fmt.Errorf("%s %d × rollout.max_context %d = %d tokens in one update exceed the limit of %d (pipeline.MaxBatchTokens)", what, n, ctx, toks, MaxBatchTokens)
	}
	m := c.Model
	if m.Heads < 1 || m.Dim > model.MaxDim || m.Layers > model.MaxLayers || m.Hidden > model.MaxHidden || m.KVHeads > m.Heads {
		return nil // the model block's own error says why
	}
	// What the model keeps per token for the backward pass (model's trainWorkspace) and its
	// gradient scratch, and a row of logits.
	perTok := c.ModelConfig(c.Tokenizer.VocabSize).EstimateMemory(model.MemoryUse{Train: true, TrainTokens: 1}).Activations
	if b := toks * perTok; b > MaxActivationBytes {
		return fmt.Errorf("%s %d × rollout.max_context %d tokens take %.1f GiB of activations with this model, over the limit of %d GiB (pipeline.MaxActivationBytes)",
			what, n, ctx, float64(b)/(1<<30), MaxActivationBytes>>30)
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Validate reports the first problem, naming the setting. envs holds the environments the
// config may name.
func (c *Config) Validate(envs *env.Registry) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !nameRE.MatchString(c.Name) {
		bad("name %q must be 1-64 letters, digits, '.', '_' or '-'", c.Name)
	}
	if c.RunsDir == "" {
		bad("runs_dir must be set")
	}
	vocab := c.Tokenizer.VocabSize
	if c.Init != "" {
		// The checkpoint's tokenizer is used: a tokenizer block other than the default would
		// be ignored.
		if t := c.Tokenizer; t != (TokenizerConfig{}) && t != DefaultTokenizer() {
			bad("tokenizer: init %s brings its own tokenizer; tokenizer.vocab_size and tokenizer.corpus_samples do nothing with it (remove the tokenizer block)", c.Init)
		}
		vocab = DefaultTokenizer().VocabSize // the checkpoint's is checked when it is loaded
	} else {
		if c.Tokenizer.VocabSize < 300 || c.Tokenizer.VocabSize > 65536 {
			bad("tokenizer.vocab_size %d must be in [300, 65536]", c.Tokenizer.VocabSize)
		}
		if c.Tokenizer.CorpusSamples < 1 || c.Tokenizer.CorpusSamples > MaxCorpusSamples {
			bad("tokenizer.corpus_samples %d must be in [1, %d]", c.Tokenizer.CorpusSamples, MaxCorpusSamples)
		}
	}
	mc := c.ModelConfig(vocab)
	pending := c.ModelPending() // the model's checks wait for the checkpoint's (initmodel.go)
	modelOK := !pending && mc.Validate() == nil
	if err := mc.Validate(); err != nil && !pending {
		errs = append(errs, err)
	}
	if err := c.Learner.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Learner.ProbeTolerance != nil && !c.Learner.External() && c.Rollout.Generator == nil {
		errs = append(errs, errors.New("learner.probe_tolerance does nothing: the built-in learner's weights are the engine's own; the sync probe runs with an external learner or rollout.generator's servers"))
	}
	errs = append(errs, c.tinkerRefusals()...) // learner_tinker.go
	for _, p := range c.Phases {
		if c.Learner.External() && p.RL != nil && p.RL.Async != nil {
			errs = append(errs, fmt.Errorf("phase %s: %w", p.Name, ErrLearnerLoop))
		}
	}
	r := c.Rollout
	if err := r.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if r.MaxContext > c.Model.MaxSeq && !pending {
		bad("rollout.max_context %d exceeds model.max_seq %d", r.MaxContext, c.Model.MaxSeq)
	}
	if r.EngineSlots < 1 || r.EngineSlots > local.MaxSlots {
		bad("rollout.engine_slots %d must be in [1, %d]", r.EngineSlots, local.MaxSlots)
	} else if modelOK && r.MaxContext > 0 && r.MaxContext <= c.Model.MaxSeq {
		if err := local.CheckSize(mc, local.EngineConfig{Slots: r.EngineSlots, MaxLen: r.MaxContext}); err != nil {
			bad("rollout.engine_slots and rollout.max_context: %v", err)
		}
	}
	if len(c.Phases) == 0 {
		bad("phases: at least one phase is needed")
	}
	names := map[string]bool{}
	hasRL := false
	for i, p := range c.Phases {
		where := fmt.Sprintf("phases[%d] (%s)", i, p.Name)
		if !nameRE.MatchString(p.Name) || names[p.Name] {
			bad("%s: name must be unique and made of letters, digits, '.', '_' or '-'", where)
		}
		names[p.Name] = true
		if err := p.validate(c, envs); err != nil {
			bad("%s: %v", where, err)
		}
		hasRL = hasRL || p.IsRL()
	}
	if c.Eval.Tasks < 1 || c.Eval.Samples < 1 {
		bad("eval.tasks and eval.samples must be positive")
	} else if c.Eval.Tasks > eval.MaxTasks || c.Eval.Samples > eval.MaxK {
		bad("eval.tasks %d and eval.samples %d must be at most %d and %d", c.Eval.Tasks, c.Eval.Samples, eval.MaxTasks, eval.MaxK)
	} else if toks := int64(c.Eval.Tasks) * int64(1+c.Eval.Samples) * r.MaxEpisodeTokens(); toks > eval.MaxEpisodeTokens {
		bad("eval: tasks %d × (1 + samples %d) episodes × %s = %d tokens exceed the limit of %d (eval.MaxEpisodeTokens)",
			c.Eval.Tasks, c.Eval.Samples, c.episodeTokens(), toks, eval.MaxEpisodeTokens)
	}
	if hub.IsRef(c.Init) {
		if _, err := hub.ParseRef(c.Init); err != nil {
			bad("init: %v", err)
		}
	} else if c.Init != "" {
		if _, err := os.Stat(c.Init); err != nil {
			bad("init: %v", err)
		}
	}
	if c.Eval.Every < 0 {
		bad("eval.every must be >= 0")
	}
	if c.Eval.Every > 0 && !hasRL {
		bad("eval.every does nothing without an rl phase")
	}
	if g := r.Generator; g != nil {
		if !hasRL {
			bad("rollout.generator does nothing without an rl phase (supervised phases and evaluation run in-process)")
		} else if err := g.ValidatePublish("rollout.generator", c.publishes(), r.Sampling.Exact()); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.validatePrecision()...) // precision.go
	errs = append(errs, c.validateDistill()...)   // distill.go
	if c.Limits != nil {
		if err := c.Limits.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Checkpoint.Every < 1 || c.Checkpoint.Keep < 1 {
		bad("checkpoint.every and checkpoint.keep must be positive")
	}
	errs = append(errs, c.Monitor.validate(c)...) // monitor_config.go
	if c.Chat != nil {
		errs = append(errs, c.Chat.validate()...) // chat.go
	}
	errs = append(errs, c.validateUserEnvs(envs)...) // userenvs.go
	if c.MCP != nil {
		used := map[string]bool{}
		for _, n := range c.EnvNames() {
			used[n] = true
		}
		if err := c.MCP.Validate(c.withUserEnvs(envs), used); err != nil {
			errs = append(errs, err)
		}
		for n, t := range c.TaskEnvs() {
			if _, ok := c.MCP.Envs[n]; ok && t.ToolsFrom != "" {
				errs = append(errs, fmt.Errorf("mcp.envs.%s: the dataset's tools are remote environment %s's (tasks.tools_from): give it MCP tools or those, not both", n, t.ToolsFrom))
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Phase) validate(c *Config, envs *env.Registry) error {
	ctx := c.Rollout.MaxContext
	if len(p.Envs) == 0 {
		return errors.New("envs: at least one environment is needed")
	}
	for _, e := range p.Envs {
		spec, err := c.lookupEnv(envs, e.Name)
		if err != nil {
			return err
		}
		if err := p.validateDifficulty(e, spec); err != nil {
			return fmt.Errorf("envs: %s: %w", e.Name, err)
		}
		if !(e.Weight > 0) || math.IsInf(e.Weight, 0) {
			return fmt.Errorf("envs: weight of %s must be a positive number, got %v", e.Name, e.Weight)
		}
		if e.Latency != nil {
			if !p.IsRL() {
				return fmt.Errorf("envs: %s: latency simulates slow steps of RL episodes and does nothing in an %s phase", e.Name, p.Kind)
			}
			if err := e.Latency.Validate(); err != nil {
				return fmt.Errorf("envs: %s: %w", e.Name, err)
			}
		}
		if e.Reward != nil {
			if err := e.Reward.validate(c, p); err != nil {
				return fmt.Errorf("envs: %s: %w", e.Name, err)
			}
		}
	}
	if p.Steps < 1 {
		return fmt.Errorf("steps must be positive, got %d", p.Steps)
	}
	if err := p.Optim.Validate(); err != nil {
		return fmt.Errorf("optim.%w", err)
	}
	if _, err := p.Optim.Schedule(p.Steps); err != nil {
		return fmt.Errorf("optim.%w", err)
	}
	if p.LoRA != nil {
		if err := p.LoRA.Validate(c.Model); err != nil {
			return err
		}
		if p.RL != nil && p.RL.Loss.Critic.Coef > 0 {
			return errors.New("lora with rl.loss.critic: the value head would stay frozen with the base (not implemented)")
		}
	}
	switch p.Kind {
	case "sft":
		if p.RL != nil {
			return errors.New("an rl block does nothing in an sft phase")
		}
		s := p.SFT
		if s == nil {
			return errors.New("an sft phase needs an sft block")
		}
		if s.Data != "" {
			if err := s.validateData(c, p); err != nil {
				return err
			}
			break
		}
		if s.BadRows != "" || s.Overlong != "" {
			return errors.New("sft.bad_rows and sft.overlong do nothing without sft.data")
		}
		if s.Demos < 1 || s.BatchSize < 1 || s.BatchSize > s.Demos {
			return fmt.Errorf("sft: demos (%d) and batch_size (%d) must be positive, batch_size <= demos", s.Demos, s.BatchSize)
		}
		if s.Demos > MaxDemos {
			return fmt.Errorf("sft.demos %d exceeds the limit of %d (pipeline.MaxDemos)", s.Demos, MaxDemos)
		}
		if toks := int64(s.Demos) * int64(ctx); toks > MaxDemoTokens {
			return fmt.Errorf("sft.demos %d × rollout.max_context %d = %d tokens exceed the limit of %d kept in memory (pipeline.MaxDemoTokens)", s.Demos, ctx, toks, MaxDemoTokens)
		}
		if err := c.checkBatch("sft.batch_size", s.BatchSize); err != nil {
			return err
		}
		if s.Noise < 0 || s.Noise > 1 {
			return fmt.Errorf("sft.noise must be in [0, 1], got %v", s.Noise)
		}
		if s.Keep != "all" && s.Keep != "successful" {
			return fmt.Errorf(`sft.keep must be "all" or "successful", got %q`, s.Keep)
		}
		if s.Curriculum < 0 || s.Curriculum > p.Steps {
			return fmt.Errorf("sft.curriculum must be in [0, steps = %d], got %d", p.Steps, s.Curriculum)
		}
	case "rl", "distill":
		if p.SFT != nil {
			return errors.New("an sft block does nothing in an rl phase")
		}
		r := p.RL
		if r == nil {
			return errors.New("an rl phase needs an rl block")
		}
		if r.GroupsPerStep < 1 || r.GroupSize < 1 || r.Epochs < 1 || r.Minibatches < 1 {
			return errors.New("rl: groups_per_step, group_size, epochs and minibatches must be positive")
		}
		if r.GroupsPerStep > MaxGroupsPerStep || r.GroupSize > MaxGroupSize || r.Epochs > MaxEpochs {
			return fmt.Errorf("rl: groups_per_step %d, group_size %d and epochs %d must be at most %d, %d and %d",
				r.GroupsPerStep, r.GroupSize, r.Epochs, MaxGroupsPerStep, MaxGroupSize, MaxEpochs)
		}
		episodes := r.GroupsPerStep * r.GroupSize
		if r.Minibatches > episodes {
			return fmt.Errorf("rl: %d minibatches for %d episodes per step", r.Minibatches, episodes)
		}
		if r.DynamicSampling != nil && (r.DynamicSampling.MaxRounds < 1 || r.DynamicSampling.MaxRounds > MaxRounds) {
			return fmt.Errorf("rl.dynamic_sampling.max_rounds %d must be in [1, %d]", r.DynamicSampling.MaxRounds, MaxRounds)
		}
		rounds := 1
		if r.DynamicSampling != nil {
			rounds = r.DynamicSampling.MaxRounds
		}
		if toks := int64(episodes) * int64(max(rounds, 1)) * c.Rollout.MaxEpisodeTokens(); toks > MaxStepTokens {
			return fmt.Errorf("rl: groups_per_step %d × group_size %d × dynamic_sampling.max_rounds %d episodes × %s = %d tokens exceed the limit of %d a step (pipeline.MaxStepTokens)",
				r.GroupsPerStep, r.GroupSize, rounds, c.episodeTokens(), toks, MaxStepTokens)
		}
		what, perMB := "rl: groups_per_step × group_size / minibatches", (episodes+r.Minibatches-1)/r.Minibatches
		if k := c.Rollout.MaxSamplesPerEpisode(); k > 1 {
			// Folds and sub-episodes add samples: a minibatch holds up to k sequences an episode.
			what, perMB = fmt.Sprintf("%s × %d samples an episode can have (rollout.context, rollout.delegate)", what, k), perMB*k
		}
		if err := c.checkBatch(what, perMB); err != nil {
			return err
		}
		if err := r.Advantage.Validate(); err != nil {
			return fmt.Errorf("rl.advantage: %w", err)
		}
		if est, err := algo.NewEstimator(r.Advantage); err != nil {
			return fmt.Errorf("rl.advantage: %w", err)
		} else if algo.Relative(est) && r.GroupSize < 2 {
			return fmt.Errorf("rl.group_size: %q compares each episode with the others of its group, and a group of %d gives no learning signal: use group_size >= 2 (or an estimator without groups: reinforce-baseline, reinforce++)", r.Advantage.Name, r.GroupSize)
		}
		if r.DynamicSampling != nil && r.GroupSize < 2 {
			return errors.New("rl.dynamic_sampling: keeps only groups whose rewards differ, which a group of one never has: use group_size >= 2 or remove dynamic_sampling")
		}
		if err := r.Loss.Validate(); err != nil {
			return fmt.Errorf("rl.loss: %w", err)
		}
		if err := checkCritic(r); err != nil {
			return err
		}
		if err := checkToolResponses(r); err != nil {
			return err
		}
		if r.KLPenalty != nil {
			if err := r.KLPenalty.Validate(); err != nil {
				return fmt.Errorf("rl.kl_penalty.%w", err)
			}
		}
		if r.Async != nil {
			if err := r.Async.validate(r, c.Rollout.Generator != nil); err != nil {
				return err
			}
		}
		exact := c.Rollout.Sampling.Exact()
		if !exact && !r.AllowSamplingMismatch {
			return errors.New("rollout sampling (temperature, top_k, top_p) differs from the distribution the learner recomputes; set rl.allow_sampling_mismatch: true to train on it anyway")
		}
		if exact && r.AllowSamplingMismatch {
			return errors.New("rl.allow_sampling_mismatch does nothing: rollout sampling is exact")
		}
	default:
		return fmt.Errorf(`kind must be "sft", "rl" or "distill", got %q`, p.Kind)
	}
	return nil
}

// ModelConfig is the model the configuration describes, for a vocabulary of vocab tokens.
func (c *Config) ModelConfig(vocab int) model.Config {
	m := c.Model
	m.Vocab = vocab
	return m
}

// checkCritic pairs a critic estimator with the critic term: the values GAE bootstraps from are
// the policy's value head, which only rl.loss.critic trains, and that term does nothing for an
// estimator that reads no values.
func checkCritic(r *RLConfig) error {
	est, err := algo.NewEstimator(r.Advantage)
	if err != nil {
		return fmt.Errorf("rl.advantage: %w", err)
	}
	needs := algo.NeedsValues(est)
	switch {
	case needs && r.Loss.Critic.Coef == 0:
		return fmt.Errorf("rl.advantage.name: %q bootstraps from the value head, which rl.loss.critic trains: set rl.loss.critic.coef > 0 (e.g. coef: 0.5, clip: 0.5)", r.Advantage.Name)
	case !needs && r.Loss.Critic.Coef > 0:
		return fmt.Errorf("rl.loss.critic does nothing with rl.advantage.name %q: it trains a value head that only a critic estimator (%s) reads", r.Advantage.Name, strings.Join(criticEstimators(), ", "))
	}
	return nil
}

// criticEstimators lists the built-in advantage estimators that need value estimates.
func criticEstimators() []string {
	var names []string
	for _, n := range algo.Estimators().Names() {
		c, err := algo.DefaultAdvantageConfig(n)
		if err != nil {
			continue
		}
		if est, err := algo.NewEstimator(c); err == nil && algo.NeedsValues(est) {
			names = append(names, n)
		}
	}
	return names
}

// checkToolResponses refuses tool-response tokens in the loss where they cannot train as the
// ablation means: with an estimator that credits turns apart they would get no advantage, and a
// critic estimator would give tokens the environment wrote a value.
func checkToolResponses(r *RLConfig) error {
	if !r.TrainToolResponses {
		return nil
	}
	est, err := algo.NewEstimator(r.Advantage)
	if err != nil {
		return fmt.Errorf("rl.advantage: %w", err)
	}
	switch {
	case algo.NeedsValues(est):
		return fmt.Errorf("rl.train_tool_responses: %q bootstraps from the value of each state the policy acted in, and the tool's tokens are not the policy's actions: use an estimator without a critic (grpo, rloo, reinforce++)", r.Advantage.Name)
	case algo.CreditsTurns(est):
		return fmt.Errorf("rl.train_tool_responses: %q credits each assistant turn apart, so tool-response tokens would get no advantage and train nothing: use a sequence-level estimator (grpo, rloo, reinforce++)", r.Advantage.Name)
	}
	return nil
}

// EnvNames lists every environment the run's phases use, sorted.
func (c *Config) EnvNames() []string {
	set := map[string]bool{}
	for _, p := range c.Phases {
		for _, e := range p.Envs {
			set[e.Name] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrLearnerLoop refuses an external learner where only the synchronous loop attaches one.
var ErrLearnerLoop = errors.New("learner: backend http and torch train the synchronous RL loop only (no rl.async)")
