package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
)

func TestPresetsValidate(t *testing.T) {
	for _, name := range Presets() {
		c, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(all.Builtins()); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "calc") {
		t.Fatalf("unknown preset: %v", err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	c, _ := Preset("calc")
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Encode(back)
	if string(again) != string(data) {
		t.Fatalf("config changed in a round trip:\n%s\n---\n%s", data, again)
	}
}

// loadCase is a configuration (a file, overrides, or both) that Load must refuse with an error
// containing want.
type loadCase struct {
	name string
	path string
	sets []string
	want string
}

// loadFixture gives a test a directory, the calc preset rendered as a file would hold it, and a
// function writing a configuration file into the directory.
func loadFixture(t *testing.T) (dir string, good []byte, write func(name, body string) string) {
	dir = t.TempDir()
	base, _ := Preset("calc")
	good, _ = Encode(base)
	write = func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return dir, good, write
}

// checkLoadErrors runs each case through Load.
func checkLoadErrors(t *testing.T, cases []loadCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(all.Builtins(), "", c.path, c.sets)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	_, good, write := loadFixture(t)
	cases := []loadCase{
		{name: "unknown key in file", path: write("a.yaml", strings.Replace(string(good), "seed:", "sede:", 1)), want: "unknown field"},
		{name: "unknown key in set", sets: []string{"phases.rl.rl.grup_size=4"}, want: "grup_size"},
		{name: "no equals", sets: []string{"seed"}, want: "key=value"},
		{name: "bad phase name", sets: []string{"phases.nope.steps=3"}, want: `no list entry named "nope"`},
		{name: "rl block in sft", sets: []string{"phases.sft.rl.groups_per_step=2"}, want: "does nothing in an sft phase"},
		{name: "sampling mismatch", sets: []string{"rollout.temperature=0.7"}, want: "allow_sampling_mismatch"},
		{name: "mismatch flag without mismatch", sets: []string{"phases.rl.rl.allow_sampling_mismatch=true"}, want: "does nothing"},
		{name: "unknown env", sets: []string{"phases.rl.envs.0.name=nope"}, want: `unknown environment "nope" (known: calc, calc-notool, code, maze, search)`},
		{name: "unknown loss", sets: []string{"phases.rl.rl.loss.policy=nope"}, want: "nope"},
		{name: "context over max_seq", sets: []string{"rollout.max_context=100000"}, want: "max_seq"},
		{name: "eval.every without rl", sets: []string{"eval.every=5", "phases.1.kind=sft"}, want: "rl"},
		{name: "wrong type", sets: []string{"seed=abc"}, want: "seed"},
		{name: "curriculum past the phase", sets: []string{"phases.sft.sft.curriculum=4000"}, want: "sft.curriculum"},
		{name: "negative curriculum", sets: []string{"phases.sft.sft.curriculum=-1"}, want: "sft.curriculum"},
		// Each package's Validate is the only check of its fields, and names them by their keys.
		{name: "warmup past the phase", sets: []string{"phases.rl.steps=3"}, want: "phases[1] (rl): optim.warmup (5) must not exceed the phase's steps (3)"},
		{name: "min_lr_ratio", sets: []string{"phases.rl.optim.min_lr_ratio=2"}, want: "optim.min_lr_ratio must be in [0, 1]"},
		{name: "beta", sets: []string{"phases.sft.optim.beta2=1"}, want: "optim.beta2 must be in [0, 1)"},
		{name: "eps", sets: []string{"phases.sft.optim.eps=0"}, want: "optim.eps must be positive"},
		{name: "grad_clip", sets: []string{"phases.sft.optim.grad_clip=-1"}, want: "optim.grad_clip"},
		{name: "norm_eps", sets: []string{"model.norm_eps=0"}, want: "model: norm_eps must be in (0, 1]"},
		{name: "heads", sets: []string{"model.heads=3"}, want: "model: dim 64 is not a multiple of heads 3"},
		{name: "inf temperature", sets: []string{"rollout.temperature=.inf", "phases.rl.rl.allow_sampling_mismatch=true"}, want: "rollout: sampling"},
		{name: "nan top_p", sets: []string{"rollout.top_p=.nan", "phases.rl.rl.allow_sampling_mismatch=true"}, want: "rollout: sampling"},
		{name: "kl_penalty without coef", sets: []string{"phases.rl.rl.kl_penalty.estimator=k1"}, want: "rl.kl_penalty.coef = 0"},
		{name: "kl_penalty estimator", sets: []string{"phases.rl.rl.kl_penalty.estimator=kl", "phases.rl.rl.kl_penalty.coef=0.1"}, want: "rl.kl_penalty.estimator: "},
		{name: "kl_penalty target", sets: []string{"phases.rl.rl.kl_penalty.estimator=k1", "phases.rl.rl.kl_penalty.coef=0.1", "phases.rl.rl.kl_penalty.adaptive.horizon=100"}, want: "rl.kl_penalty.adaptive.target = 0"},
		{name: "kl_penalty horizon", sets: []string{"phases.rl.rl.kl_penalty.estimator=k1", "phases.rl.rl.kl_penalty.coef=0.1", "phases.rl.rl.kl_penalty.adaptive.target=0.1"}, want: "rl.kl_penalty.adaptive.horizon = 0"},
		{name: "critic estimator without critic", path: write("gae.yaml", strings.Replace(string(good), "      name: grpo\n", "      name: gae\n      gae:\n        gamma: 1.0\n        lambda: 0.95\n", 1)),
			want: `rl.advantage.name: "gae" bootstraps from the value head, which rl.loss.critic trains: set rl.loss.critic.coef > 0`},
		{name: "critic without critic estimator", sets: []string{"phases.rl.rl.loss.critic.coef=0.5"}, want: `rl.loss.critic does nothing with rl.advantage.name "grpo"`},
		{name: "critic clip without coef", sets: []string{"phases.rl.rl.advantage.name=gae", "phases.rl.rl.loss.critic.coef=0"}, want: "critic.clip does nothing with critic.coef = 0"},
		{name: "critic coef negative", sets: []string{"phases.rl.rl.advantage.name=gae", "phases.rl.rl.loss.critic.coef=-1"}, want: "critic coef -1"},
		{name: "gae lambda", sets: []string{"phases.rl.rl.advantage.name=gae", "phases.rl.rl.advantage.gae.lambda=2"}, want: "gae.lambda = 2"},
		{name: "gae key under grpo", sets: []string{"phases.rl.rl.advantage.gae.no_whiten=true"}, want: "gae.* does nothing"},
		{name: "unknown critic key", sets: []string{"phases.rl.rl.advantage.name=gae", "phases.rl.rl.loss.critic.cliprange=0.2"}, want: "cliprange"},
	}
	checkLoadErrors(t, cases)
	if _, err := Load(all.Builtins(), "calc", write("b.yaml", string(good)), nil); err == nil {
		t.Fatal("a preset and a file together were accepted")
	}
}

// Configurations written before norm_eps and eps were settings read with the values the
// program used then.
func TestDecodeFillsSettingsOlderConfigsLack(t *testing.T) {
	c, _ := Preset("calc")
	data, _ := Encode(c)
	old := strings.ReplaceAll(strings.ReplaceAll(string(data), "  norm_eps: 1e-05\n", ""), "    eps: 1e-08\n", "")
	if old == string(data) || strings.Contains(old, "norm_eps") || strings.Contains(old, " eps:") {
		t.Fatalf("the preset's rendering changed; update the test:\n%s", data)
	}
	back, err := Decode([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if back.Model.NormEps != model.DefaultNormEps || back.Phases[0].Optim.Eps != learn.DefaultEps || back.Phases[1].Optim.Eps != learn.DefaultEps {
		t.Fatalf("norm_eps %v, eps %v %v", back.Model.NormEps, back.Phases[0].Optim.Eps, back.Phases[1].Optim.Eps)
	}
	if err := back.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
}

// config show renders every block of the loss, kl, critic and correction included, and its
// output loads back as it is.
func TestRenderingShowsEveryLossBlock(t *testing.T) {
	c, _ := Preset("calc")
	data, _ := Encode(c)
	for _, k := range []string{"\n      kl:\n", "\n      critic:\n", "\n      correction:\n", "\n  norm_eps:", "\n    eps:"} {
		if !strings.Contains(string(data), k) {
			t.Errorf("rendering lacks %q", k)
		}
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
}

// Setting the estimator to gae gives it its defaults and the critic term it needs, so one
// --set makes a PPO+GAE run; back to grpo drops them. The rendering shows every key, and loads back.
func TestOverrideEstimator(t *testing.T) {
	c, err := Load(all.Builtins(), "", "", []string{"phases.rl.rl.advantage.gae.lambda=0.9", "phases.rl.rl.advantage.name=gae"})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Phases[1].RL
	if r.Advantage.Name != "gae" || r.Advantage.GAE != (algo.GAEConfig{Gamma: 1, Lambda: 0.9}) || r.Loss.Critic != algo.DefaultCriticConfig() {
		t.Fatalf("advantage %+v, critic %+v", r.Advantage, r.Loss.Critic)
	}
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`\n +name: gae\n +gae:\n +gamma: 1\.0\n +lambda: 0\.9\n +no_whiten: false\n`, `\n +critic:\n +coef: 0\.5\n +clip: 0\.5\n`} {
		if !regexp.MustCompile(k).Match(data) {
			t.Errorf("rendering lacks %q:\n%s", k, data)
		}
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
	// A critic set explicitly is kept; switching to a critic-free estimator drops it.
	c, err = Load(all.Builtins(), "", "", []string{"phases.rl.rl.advantage.name=gae-turn", "phases.rl.rl.loss.critic.coef=1", "phases.rl.rl.loss.critic.clip=0"})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Phases[1].RL; r.Advantage.Name != "gae-turn" || r.Loss.Critic != (algo.CriticConfig{Coef: 1}) {
		t.Fatalf("advantage %+v, critic %+v", r.Advantage, r.Loss.Critic)
	}
	c, err = Override(c, []string{"phases.rl.rl.advantage.name=rloo"})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Phases[1].RL; r.Advantage != (algo.AdvantageConfig{Name: "rloo"}) || r.Loss.Critic != (algo.CriticConfig{}) {
		t.Fatalf("advantage %+v, critic %+v", r.Advantage, r.Loss.Critic)
	}
	if err := c.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
}

func TestOverride(t *testing.T) {
	c, err := Load(all.Builtins(), "", "", []string{"seed=7", "phases.rl.rl.group_size=4", "phases.1.steps=3", "phases.1.optim.warmup=1",
		"phases.rl.rl.dynamic_sampling.max_rounds=2", "phases.0.envs=[{name: calc, weight: 2}]"})
	if err != nil {
		t.Fatal(err)
	}
	rl := c.Phases[1]
	if c.Seed != 7 || rl.RL.GroupSize != 4 || rl.Steps != 3 || rl.RL.DynamicSampling == nil || rl.RL.DynamicSampling.MaxRounds != 2 || c.Phases[0].Envs[0].Weight != 2 {
		t.Fatalf("overrides not applied: %+v %+v", c, rl.RL)
	}
}
