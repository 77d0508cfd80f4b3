package learn

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/agentrl/agentrl/internal/envref"
)

// The learner backends a run's `learner:` block names.
const (
	BackendBuiltin = "builtin" // the built-in model, in-process (the default)
	BackendHTTP    = "http"    // a learner process someone else runs, at url (docs/learner.md)
	BackendTorch   = "torch"   // the reference PyTorch learner, started and stopped by the run
	BackendTinker  = "tinker"  // a Tinker API service (hosted Tinker, SkyRL's server), at url (learn/tinker)
)

// BackendConfig is a run's `learner:` block: which learner its RL phases train through.
// Supervised phases always run on the built-in model.
type BackendConfig struct {
	// Backend is builtin (default), http, torch or tinker.
	Backend string `yaml:"backend"`
	// URL is an http learner's address, http://host:port, or a Tinker service's base URL.
	URL string `yaml:"url,omitempty"`
	// Key is "${NAME}": the environment variable holding the learner's key (required off
	// loopback; for torch, the started learner requires it too).
	Key string `yaml:"key,omitempty"`
	// Timeout bounds each call to the learner (default 5 minutes).
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// BaseModel is the Tinker service's base model the run trains a LoRA adapter on, as the
	// service names it (e.g. Qwen/Qwen3-4B-Instruct-2507) (tinker).
	BaseModel string `yaml:"base_model,omitempty"`
	// Rank is the LoRA rank of the adapter the Tinker service trains (tinker).
	Rank int `yaml:"rank,omitempty"`
	// Python is the interpreter that runs agentrl_learner (torch).
	Python string `yaml:"python,omitempty"`
	// Path is the folder holding the agentrl_learner package (the repository's learners/torch),
	// put on PYTHONPATH; empty when the package is installed (torch).
	Path string `yaml:"path,omitempty"`
	// Device is torch's device (default: cuda when available, else cpu) (torch).
	Device string `yaml:"device,omitempty"`
	// BF16 runs the forward passes under bf16 autocast (CUDA) (torch).
	BF16 bool `yaml:"bf16,omitempty"`
	// MaxTokens is the padded positions of one micro-batch (default 16384) (torch).
	MaxTokens int `yaml:"max_tokens,omitempty"`
	// ActivationCheckpointing recomputes each block's activations in the backward pass instead
	// of keeping them (torch).
	ActivationCheckpointing bool `yaml:"activation_checkpointing,omitempty"`
	// ProbeTolerance bounds the weight-sync probe: the largest |Δ logprob| allowed, per
	// precision, between the learner and what samples its weights (the run's model, and every
	// inference server of rollout.generator). Absent: DefaultProbeTolerance.
	ProbeTolerance *ProbeTolerance `yaml:"probe_tolerance,omitempty"`
	// Restart is how many times a run restarts a torch learner that died, stopped answering
	// within the timeout or restarted by itself: the new process gets the state saved before the
	// step (one save_state per step while restarts are left) and the step is done again. 0: the
	// run stops, resumable from its last checkpoint (torch).
	Restart int `yaml:"restart,omitempty"`
}

// ProbeTolerance is the sync probe's bound per precision: a comparison is judged in the lower of
// the two sides' precisions (a bfloat16 server against a float32 learner: bfloat16).
type ProbeTolerance struct {
	Float32  *float64 `yaml:"float32,omitempty"`
	BFloat16 *float64 `yaml:"bfloat16,omitempty"`
}

// DefaultProbeTolerance is the bound where probe_tolerance does not set one: float32 sides
// agree to rounding over a sequence's forward pass; bfloat16's 8-bit mantissa moves a logprob
// by up to a few tenths on a long random sequence.
var DefaultProbeTolerance = map[string]float64{"float32": 1e-3, "bfloat16": 0.25}

// Tolerance is the bound for a comparison judged in precision (float32, bfloat16; any other
// format below float32 is judged as bfloat16).
func (c BackendConfig) Tolerance(precision string) float64 {
	t := c.ProbeTolerance
	if precision == "float32" {
		if t != nil && t.Float32 != nil {
			return *t.Float32
		}
		return DefaultProbeTolerance["float32"]
	}
	if t != nil && t.BFloat16 != nil {
		return *t.BFloat16
	}
	return DefaultProbeTolerance["bfloat16"]
}

// External reports whether RL steps train in a learner process whose weights the run loads back
// (http, torch).
func (c BackendConfig) External() bool { return c.Backend == BackendHTTP || c.Backend == BackendTorch }

// Tinker reports whether RL steps train on a Tinker service, whose weights stay there.
func (c BackendConfig) Tinker() bool { return c.Backend == BackendTinker }

// Validate reports a setting that cannot work or does nothing, by its YAML name.
func (c BackendConfig) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("learner.timeout must not be negative, got %v", c.Timeout)
	}
	if c.MaxTokens < 0 || (c.MaxTokens > 0 && c.MaxTokens < 2) {
		return fmt.Errorf("learner.max_tokens must be at least 2, got %d", c.MaxTokens)
	}
	if c.Key != "" && !envref.IsRef(c.Key) {
		return errors.New(`learner.key must name an environment variable as "${NAME}", not hold the key`)
	}
	if t := c.ProbeTolerance; t != nil {
		if t.Float32 == nil && t.BFloat16 == nil {
			return errors.New("learner.probe_tolerance sets neither float32 nor bfloat16")
		}
		for _, x := range []struct {
			name string
			v    *float64
		}{{"float32", t.Float32}, {"bfloat16", t.BFloat16}} {
			if x.v != nil && !(*x.v > 0 && *x.v < math.Inf(1)) {
				return fmt.Errorf("learner.probe_tolerance.%s must be a finite number > 0, got %v", x.name, *x.v)
			}
		}
	}
	if c.Restart < 0 {
		return fmt.Errorf("learner.restart must not be negative, got %d", c.Restart)
	}
	torchOnly := c.Python != "" || c.Path != "" || c.Device != "" || c.BF16 || c.MaxTokens != 0 || c.ActivationCheckpointing || c.Restart != 0
	tinkerOnly := c.BaseModel != "" || c.Rank != 0
	if tinkerOnly && c.Backend != BackendTinker {
		return errors.New("learner: base_model and rank are settings of the tinker backend")
	}
	switch c.Backend {
	case "", BackendBuiltin:
		if c.URL != "" || c.Key != "" || c.Timeout != 0 || torchOnly {
			return errors.New("learner: url, key, timeout, python, path, device, bf16, max_tokens, activation_checkpointing and restart do nothing with the builtin backend")
		}
	case BackendTinker:
		if c.URL == "" || c.BaseModel == "" {
			return errors.New("learner.url and learner.base_model are required with backend tinker")
		}
		if c.Rank < 1 {
			return fmt.Errorf("learner.rank (the LoRA rank the Tinker service trains) must be at least 1, got %d", c.Rank)
		}
		if torchOnly {
			return errors.New("learner: python, path, device, bf16, max_tokens, activation_checkpointing and restart are settings of the torch backend (a Tinker service is configured where it runs)")
		}
		if c.ProbeTolerance != nil {
			return errors.New("learner.probe_tolerance does nothing with backend tinker: the run samples from the weights the service saved for sampling, and checks the path it sampled is the version saved")
		}
	case BackendHTTP:
		if c.URL == "" {
			return errors.New("learner.url is required with backend http")
		}
		if torchOnly {
			return errors.New("learner: python, path, device, bf16, max_tokens, activation_checkpointing and restart are settings of the torch backend (the http learner is configured and restarted where it runs)")
		}
	case BackendTorch:
		if c.Python == "" {
			return errors.New("learner.python (the interpreter with torch) is required with backend torch")
		}
		if c.URL != "" {
			return errors.New("learner.url does nothing with backend torch: the run starts the learner on a loopback port")
		}
		if c.BF16 && c.Device == "cpu" {
			return errors.New("learner.bf16 is autocast on CUDA; it does nothing on device cpu")
		}
	default:
		return fmt.Errorf("learner.backend must be builtin, http, torch or tinker, got %q", c.Backend)
	}
	return nil
}
