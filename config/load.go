package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/rollout"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/token"
)

// Presets lists the built-in configurations, one per built-in environment.
func Presets() []string {
	return []string{"calc", "calc-notool", "code", "ledger", "maze", "parts", "search"}
}

// Preset returns the built-in configuration for an environment. "calc" is the default of
// `agentrl train`: a cold start on the noisy expert's demonstrations, then GRPO with groups of 8;
// "calc-notool" is the same run on calc's tasks without the calculator.
func Preset(name string) (Config, error) {
	c := Config{
		Name:    name,
		Seed:    1,
		RunsDir: "runs",
		Model: model.Config{Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 384, RopeTheta: 10000,
			NormEps: model.DefaultNormEps, TieEmbeddings: true},
		Tokenizer: DefaultTokenizer(),
		Rollout: RolloutConfig{
			Config: rollout.Config{
				MaxTurns: 4, MaxContext: 384, MaxTokensPerTurn: 64, EpisodeTimeout: 2 * time.Minute,
				Sampling: infer.Sampling{Temperature: 1},
			},
			EngineSlots: 64,
		},
		Eval:       EvalConfig{Tasks: 200, Samples: 4, Every: 0},
		Checkpoint: CheckpointConfig{Every: 10, Keep: 2},
		Monitor:    MonitorConfig{MinEntropy: 0.02, MaxZeroVarShare: 0.9, MaxKL: 0.05, MaxLatencyBias: 1.2},
	}
	sft := Phase{
		Name: "sft", Kind: "sft", Steps: 3000,
		Optim: optimConfig(3e-3, 0.1, 20, 0.01),
		SFT:   &SFTConfig{Demos: 4000, Noise: 0.5, BatchSize: 32, Keep: "all"},
	}
	adv, _ := algo.DefaultAdvantageConfig("grpo")
	rl := Phase{
		Name: "rl", Kind: "rl", Steps: 100,
		Optim: optimConfig(1e-4, 1, 5, 0),
		RL: &RLConfig{
			GroupsPerStep: 16, GroupSize: 8, Epochs: 1, Minibatches: 4,
			Advantage: adv, Loss: algo.DefaultLossConfig(),
			DynamicSampling: &DynamicSamplingConfig{MaxRounds: 3},
		},
	}
	switch name {
	case "calc":
	case "calc-notool":
		// calc's tasks and training with no calculator: the text-only arm of tool-integrated RL.
	case "search":
		// Multi-hop retrieval: up to 3 lookups and an answer. The noisy expert's successful
		// demonstrations only (its wrong guesses would teach guessing), and sequence-length warmup:
		// naming the entity to look up is a copy from the question, learned fastest in short
		// prefixes before whole episodes.
		c.Rollout.MaxTurns, c.Rollout.MaxContext, c.Model.MaxSeq = 6, 512, 512
		c.Rollout.MaxTokensPerTurn = 48
		c.Rollout.EngineSlots = 128
		sft.Steps, sft.SFT.BatchSize = 2000, 24
		sft.SFT.Noise, sft.SFT.Keep, sft.SFT.Curriculum = 0.25, "successful", 800
		rl.Steps = 150
	case "maze":
		// One-word moves answered by a 3×3 view. Twelve turns cover every shortest path (4–10
		// moves) and keep episodes under 384 tokens: the supervised loss leaves the uniform-move
		// plateau after ~900 steps at this length, and not within 300 at 24 turns and 768 tokens.
		// Observations repeat, so GiGPO's step-level groups apply. Expert noise 0.2: at 0.5 the
		// demonstrated move is random half the time, so imitation has little to learn (the loss
		// floor is 0.53 nats against the uniform plateau's 0.69) and most demonstrations overrun
		// the context; at 0.2 the loss leaves the plateau after ~250 steps instead of ~900. SFT
		// at 1,500 steps reached 11% sampled pass@1, at 3,000 22.5% (BENCHMARKS.md).
		c.Rollout.MaxTurns, c.Rollout.MaxContext, c.Model.MaxSeq = 12, 384, 384
		c.Rollout.MaxTokensPerTurn = 8
		c.Rollout.EngineSlots = 128
		rl.RL.Advantage, _ = algo.DefaultAdvantageConfig("gigpo")
		rl.RL.GroupsPerStep = 8
		sft.Steps, sft.SFT.BatchSize, sft.SFT.Noise = 3000, 32, 0.2
		rl.Steps = 120
	case "ledger":
		// A page a turn (2-6 pages, then the answer); the longer ledgers outgrow max_context,
		// which is what context folding (rollout.context) is measured against. Fifteen turns: a
		// policy that folds after every page (a page is ~250 tokens) takes two a page; without
		// folding the environment's own limit (pages and three) comes first.
		// The supervised phase is search's (2,000 steps on the successful demonstrations of an
		// expert at noise 0.25): what the policy learns is copies (the last balance into a
		// summary or the answer), and at 1,000 steps on every demonstration at noise 0.3 it had
		// learned none.
		c.Rollout.MaxTurns, c.Rollout.MaxContext, c.Model.MaxSeq = 15, 768, 768
		c.Rollout.MaxTokensPerTurn = 96
		sft.Steps, sft.SFT.BatchSize = 2000, 16
		sft.SFT.Noise, sft.SFT.Keep = 0.25, "successful"
		rl.Steps = 60
		rl.RL.GroupsPerStep = 8
	case "parts":
		// 2-4 items looked up (up to four a turn), the costs added with the calculator, then the
		// total; sub-agents (rollout.delegate) may take items apart. 768 tokens hold a single
		// agent's four records (~60 tokens each) beside the tools' descriptions; eight (level 4)
		// do not. 128 tokens a turn hold four calls (~25 tokens each).
		// The supervised phase is search's, for the same reason as ledger's: the items' names
		// are copied into lookups (or sub-tasks), the costs into the calculator.
		c.Rollout.MaxTurns, c.Rollout.MaxContext, c.Model.MaxSeq = 6, 768, 768
		c.Rollout.MaxTokensPerTurn = 128
		sft.Steps, sft.SFT.BatchSize = 2000, 16
		sft.SFT.Noise, sft.SFT.Keep = 0.25, "successful"
		rl.Steps = 60
		rl.RL.GroupsPerStep = 8
	case "code":
		c.Rollout.MaxTurns, c.Rollout.MaxContext, c.Model.MaxSeq = 4, 768, 768
		c.Rollout.MaxTokensPerTurn = 160
		c.Rollout.EpisodeTimeout = 5 * time.Minute
		sft.Steps, sft.SFT.BatchSize = 2000, 16
		rl.Steps = 40
		rl.RL.GroupsPerStep = 8
	default:
		return Config{}, fmt.Errorf("pipeline: unknown preset %q (known: %s)", name, strings.Join(Presets(), ", "))
	}
	sft.Envs = []EnvWeight{{Name: name, Weight: 1}}
	rl.Envs = []EnvWeight{{Name: name, Weight: 1}}
	c.Phases = []Phase{sft, rl}
	return c, nil
}

// optimConfig is the presets' optimizer: AdamW with β = (0.9, 0.99), gradient norm clipped to 1.
func optimConfig(lr, minLRRatio float64, warmup int, weightDecay float32) learn.Config {
	return learn.Config{
		ScheduleConfig: optim.ScheduleConfig{LR: lr, MinLRRatio: minLRRatio, Warmup: warmup},
		Config:         optim.Config{Beta1: 0.9, Beta2: 0.99, Eps: learn.DefaultEps, WeightDecay: weightDecay},
		GradClip:       1,
	}
}

// Load builds a configuration: the preset (default "calc") or the YAML file at path, then each
// key=value override in sets, then validation against the environments of envs. Unknown keys
// anywhere are errors that say where.
func Load(envs *env.Registry, preset, path string, sets []string) (Config, error) {
	var c Config
	if path != "" {
		if preset != "" {
			return c, errors.New("pipeline: give a preset or a config file, not both")
		}
		data, err := readConfigFile(path)
		if err != nil {
			return c, fmt.Errorf("pipeline: read config: %w", err)
		}
		if c, err = Decode(data); err != nil {
			return c, fmt.Errorf("pipeline: %s: %w", path, err)
		}
		if err := c.resolvePaths(filepath.Dir(path)); err != nil {
			return c, err
		}
	} else {
		if preset == "" {
			preset = "calc"
		}
		var err error
		if c, err = Preset(preset); err != nil {
			return c, err
		}
	}
	if len(sets) > 0 {
		var err error
		def, named := c.Model, c.modelNamed
		if c, err = Override(c, sets); err != nil {
			return c, err
		}
		if c.Init != "" {
			if path == "" {
				c.unsetDefaults(def, sets) // the preset's model is no statement about init's (initmodel.go)
			}
			c.modelNamed = setModelKeys(named, sets)
		}
		if err := c.resolvePaths("."); err != nil { // paths --set gave are the working folder's
			return c, err
		}
	}
	if err := c.Validate(envs); err != nil {
		return c, fmt.Errorf("pipeline: invalid config:\n%w", err)
	}
	return c, nil
}

// DecodeFile reads and strictly decodes the configuration file at path, as Load does, without
// validating it: for commands that use only part of a run's configuration (its mcp block).
func DecodeFile(path string) (Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("pipeline: read config: %w", err)
	}
	c, err := Decode(data)
	if err != nil {
		return c, fmt.Errorf("pipeline: %s: %w", path, err)
	}
	if err := c.resolvePaths(filepath.Dir(path)); err != nil {
		return c, err
	}
	return c, nil
}

// Decode parses YAML strictly: unknown keys are errors with line, column and a snippet, a
// fraction where an integer belongs is an error naming the key, and input over MaxConfigBytes
// or nested deeper than MaxConfigDepth is refused before it is parsed.
func Decode(data []byte) (Config, error) {
	// norm_eps is absent from configurations written before it was a setting; with init, an
	// absent setting is the checkpoint's (initmodel.go).
	c := Config{Model: model.Config{NormEps: model.DefaultNormEps}}
	err := decodeYAML(data, &c)
	if err == nil && c.Init != "" {
		c = Config{}
		if err = decodeYAML(data, &c); err == nil {
			c.modelNamed = namedModelKeys(data) // a setting at its zero value still states it
		}
	}
	fillRewardDefaults(&c)
	return c, err
}

// Encode renders c as YAML (what `agentrl config show` prints and run directories keep).
func Encode(c Config) ([]byte, error) { return yaml.Marshal(c) }

// Override applies key=value settings. A key is a dotted path: "seed", "phases.1.steps", or a
// phase by name, "phases.rl.rl.group_size". The value is read as YAML ("16", "true", "1e-3",
// "[a, b]", "{name: calc, weight: 1}"). A key that does not exist is an error, as in a file.
// Setting a loss's policy to another one ("phases.rl.rl.loss.policy=gspo") gives that loss
// the new policy's paper defaults (algo.LossConfig.WithPolicy), and setting the advantage
// estimator ("phases.rl.rl.advantage.name=gae") gives it its defaults and the critic term it needs
// (switchEstimator); such settings apply first, so the new policy's or estimator's own settings
// can follow in any order.
func Override(c Config, sets []string) (Config, error) {
	data, err := yaml.Marshal(c)
	if err != nil {
		return c, err
	}
	var tree any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return c, err
	}
	ordered := make([]string, 0, len(sets))
	for _, s := range sets {
		if key, _, _ := strings.Cut(s, "="); isPolicyKey(key) || isEstimatorKey(key) {
			ordered = append(ordered, s)
		}
	}
	for _, s := range sets {
		if key, _, _ := strings.Cut(s, "="); !isPolicyKey(key) && !isEstimatorKey(key) {
			ordered = append(ordered, s)
		}
	}
	for _, s := range ordered {
		key, val, ok := strings.Cut(s, "=")
		if !ok || key == "" {
			return c, fmt.Errorf("pipeline: --set %q: want key=value", s)
		}
		v, err := parseSetValue(val)
		if err != nil {
			return c, fmt.Errorf("pipeline: --set %s: value %q: %w", key, val, err)
		}
		path := strings.Split(key, ".")
		if name, ok := v.(string); ok && isPolicyKey(key) {
			if tree, err = switchPolicy(tree, path[:len(path)-1], name, key); err != nil {
				return c, err
			}
			continue
		}
		if name, ok := v.(string); ok && isEstimatorKey(key) {
			if tree, err = switchEstimator(tree, path[:len(path)-2], name, key); err != nil {
				return c, err
			}
			continue
		}
		if tree, err = setPath(tree, path, v, key); err != nil {
			return c, err
		}
	}
	if data, err = yaml.Marshal(tree); err != nil {
		return c, err
	}
	out, err := Decode(data)
	if err != nil {
		return c, fmt.Errorf("pipeline: --set: %w", err)
	}
	return out, nil
}

// parseSetValue reads one --set value as YAML, under the bounds of a configuration file and
// without anchors or aliases (which a value on a command line has no use for, and whose
// expansion could be exponential).
func parseSetValue(val string) (any, error) {
	toks, err := scanYAML([]byte(val))
	if err != nil {
		return nil, err
	}
	for _, t := range toks {
		if t.Type == token.AnchorType || t.Type == token.AliasType {
			return nil, errors.New("anchors and aliases (&, *) are not accepted in --set values")
		}
	}
	var v any
	if err := yaml.Unmarshal([]byte(val), &v); err != nil {
		return nil, err
	}
	return v, nil
}

func isPolicyKey(key string) bool { return strings.HasSuffix(key, ".loss.policy") }

// switchPolicy gives the loss block at path the policy name with its paper defaults, when name
// is not already its policy.
func switchPolicy(tree any, path []string, name, full string) (any, error) {
	cur, ok := lookupPath(tree, path)
	m, isMap := cur.(map[string]any)
	if !ok || !isMap {
		return setPath(tree, append(path, "policy"), name, full)
	}
	if m["policy"] == name {
		return tree, nil
	}
	data, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	var lc algo.LossConfig
	if err := yaml.Unmarshal(data, &lc); err != nil {
		return setPath(tree, append(path, "policy"), name, full) // the decode reports it
	}
	if data, err = yaml.Marshal(lc.WithPolicy(name)); err != nil {
		return nil, err
	}
	var nm any
	if err := yaml.Unmarshal(data, &nm); err != nil {
		return nil, err
	}
	return setPath(tree, path, nm, full)
}

func isEstimatorKey(key string) bool { return strings.HasSuffix(key, ".advantage.name") }

// switchEstimator gives the rl block at path the advantage estimator name with its defaults
// (algo.DefaultAdvantageConfig), when name is not already its estimator. A critic estimator
// (gae, gae-turn) also gets algo.DefaultCriticConfig's critic term when the loss has none, and a
// critic-free one drops the critic term it would not read.
func switchEstimator(tree any, path []string, name, full string) (any, error) {
	cur, ok := lookupPath(tree, path)
	rl, isMap := cur.(map[string]any)
	if !ok || !isMap {
		return setPath(tree, append(path, "advantage", "name"), name, full)
	}
	if adv, ok := rl["advantage"].(map[string]any); ok && adv["name"] == name {
		return tree, nil
	}
	ac, err := algo.DefaultAdvantageConfig(name)
	if err != nil {
		return setPath(tree, append(path, "advantage", "name"), name, full) // the validation reports it
	}
	var adv any
	if err := remarshal(ac, &adv); err != nil {
		return nil, err
	}
	if tree, err = setPath(tree, append(path, "advantage"), adv, full); err != nil {
		return nil, err
	}
	est, err := algo.NewEstimator(ac)
	if err != nil {
		return tree, nil
	}
	var critic algo.CriticConfig
	if c, ok := lookupPath(tree, append(path, "loss", "critic")); ok {
		if err := remarshal(c, &critic); err != nil {
			return tree, nil // the decode reports it
		}
	}
	switch needs := algo.NeedsValues(est); {
	case needs && critic.Coef == 0:
		critic = algo.DefaultCriticConfig()
	case !needs:
		critic = algo.CriticConfig{}
	default:
		return tree, nil
	}
	var node any
	if err := remarshal(critic, &node); err != nil {
		return nil, err
	}
	return setPath(tree, append(path, "loss", "critic"), node, full)
}

// remarshal converts v to out through YAML.
func remarshal(v, out any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, out)
}

// lookupPath returns the node at path, resolving list entries by index or name as setPath does.
func lookupPath(node any, path []string) (any, bool) {
	for _, k := range path {
		switch n := node.(type) {
		case map[string]any:
			v, ok := n[k]
			if !ok {
				return nil, false
			}
			node = v
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil {
				i = -1
				for j, el := range n {
					if m, ok := el.(map[string]any); ok && m["name"] == k {
						i = j
					}
				}
			}
			if i < 0 || i >= len(n) {
				return nil, false
			}
			node = n[i]
		default:
			return nil, false
		}
	}
	return node, true
}

func setPath(node any, path []string, v any, full string) (any, error) {
	if len(path) == 0 {
		return v, nil
	}
	k := path[0]
	switch n := node.(type) {
	case map[string]any:
		// A key absent here may be an optional block left out of the rendering; the strict
		// decode that follows rejects it if the configuration has no such setting.
		nv, err := setPath(n[k], path[1:], v, full)
		if err != nil {
			return nil, err
		}
		n[k] = nv
		return n, nil
	case []any:
		i, err := strconv.Atoi(k)
		if err != nil {
			i = -1
			for j, el := range n {
				if m, ok := el.(map[string]any); ok && m["name"] == k {
					i = j
				}
			}
			if i < 0 {
				return nil, fmt.Errorf("pipeline: --set %s: no list entry named %q", full, k)
			}
		}
		if i < 0 || i >= len(n) {
			return nil, fmt.Errorf("pipeline: --set %s: index %d outside a list of %d", full, i, len(n))
		}
		nv, err := setPath(n[i], path[1:], v, full)
		if err != nil {
			return nil, err
		}
		n[i] = nv
		return n, nil
	case nil:
		// An optional block that is absent: build it from the path.
		return setPath(map[string]any{}, path, v, full)
	default:
		return nil, fmt.Errorf("pipeline: --set %s: %q is a value, not a block", full, k)
	}
}
