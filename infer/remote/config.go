package remote

import (
	"errors"
	"fmt"
	"github.com/agentrl/agentrl/internal/envref"
	"strings"
	"time"
)

// Config is a run's generation on inference servers (the run config's rollout.generator): the
// servers, each with its dialect and the environment variable that holds its API key, and the
// router's deadline and attempts. Keys are never part of it: api_key names a variable, read when
// the router connects, so a saved config holds no secret.
type Config struct {
	Servers []ServerConfig `yaml:"servers"`
	// Timeout is the deadline of one call to one server (default 5m).
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// Attempts is how many servers one request may try (default min(3, servers)).
	Attempts int `yaml:"attempts,omitempty"`
}

// ServerConfig is one server of a Config.
type ServerConfig struct {
	Server `yaml:",inline"`
	// Key is "${NAME}": the API key is the environment variable NAME, read at connect time.
	Key string `yaml:"api_key,omitempty"`
	// SharedDisk declares that an SGLang or vLLM server reads the trainer's disk at the same paths
	// (one host, or a shared file system): weights (SGLang) or LoRA adapters (vLLM) are published
	// to it as a folder it loads from disk.
	SharedDisk bool `yaml:"shared_disk,omitempty"`
}

// Publish says what the trainer publishes to every server: nothing, full weights (an RL phase
// that trains them), LoRA adapters (one that trains adapters), or both (several RL phases).
type Publish uint8

const (
	PublishWeights Publish = 1 << iota
	PublishAdapters
)

// Validate is ValidatePublish with publish PublishWeights when publish is true, nothing otherwise.
func (c *Config) Validate(prefix string, publish, exact bool) error {
	var p Publish
	if publish {
		p = PublishWeights
	}
	return c.ValidatePublish(prefix, p, exact)
}

// ValidatePublish checks the block; prefix names it in errors ("rollout.generator"). publish says what
// the trainer publishes to every server: full weights go to an agentrl server (with an api_key:
// its weight route always wants one) or an SGLang server with shared_disk; adapters go to a vLLM
// server with shared_disk (it loads them from its disk through its LoRA routes). exact says the
// rollout samples exactly (temperature 1, no top-k or top-p), which servers that return raw
// logprobs need.
func (c *Config) ValidatePublish(prefix string, publish Publish, exact bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(prefix+"."+format, a...)) }
	if len(c.Servers) == 0 {
		bad("servers: at least one server is needed (remove the generator block to generate in-process)")
	}
	if c.Timeout < 0 {
		bad("timeout must not be negative, got %s", c.Timeout)
	}
	if c.Attempts < 0 || (len(c.Servers) > 0 && c.Attempts > len(c.Servers)) {
		bad("attempts must be in [0, %d] (0: min(3, servers)), got %d", len(c.Servers), c.Attempts)
	}
	names := map[string]bool{}
	for i, s := range c.Servers {
		where := fmt.Sprintf("servers[%d]", i)
		if s.Name == "" {
			bad("%s.name must be set", where)
		} else if names[s.Name] {
			bad("%s.name %q is used twice", where, s.Name)
		}
		names[s.Name] = true
		if _, err := dialectOf(s.Dialect); err != nil {
			bad("%s.dialect: %q is not one of agentrl, vllm, sglang", where, s.Dialect)
		}
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			bad("%s.url %q must start with http:// or https://", where, s.URL)
		}
		if s.Dialect == VLLM && s.Model == "" {
			bad("%s.model: a vllm server needs its served model name", where)
		}
		if s.Dialect != VLLM && s.Model != "" {
			bad("%s.model does nothing for a %s server", where, s.Dialect)
		}
		if s.Dialect == Agentrl && s.ProcessedLogprobs {
			bad("%s.processed_logprobs does nothing for an agentrl server (it always returns them)", where)
		}
		if s.Dialect != Agentrl && !s.ProcessedLogprobs && !exact {
			bad("%s: a %s server returns logprobs before temperature, top-k and top-p; sample exactly or declare processed_logprobs (vLLM: --logprobs-mode processed_logprobs)", where, s.Dialect)
		}
		switch {
		case s.Precision != "" && s.Precision != Float32 && s.Precision != BFloat16:
			bad("%s.precision must be float32 or bfloat16, got %q", where, s.Precision)
		case s.Precision != "" && s.Dialect == Agentrl:
			bad("%s.precision does nothing for an agentrl server (it computes in float32)", where)
		}
		if s.Key != "" && !envref.IsRef(s.Key) {
			bad("%s.api_key must name an environment variable as ${NAME}: keys are never written in a run's config", where)
		}
		if s.SharedDisk && s.Dialect == Agentrl {
			bad("%s.shared_disk is for sglang and vllm servers (agentrl servers receive the weights over HTTP)", where)
		}
		if publish&PublishAdapters != 0 {
			switch {
			case s.Dialect == Agentrl:
				bad("%s: an RL phase that trains LoRA publishes adapters, and an agentrl server receives the base weights alone; use vLLM with shared_disk", where)
			case s.Dialect == SGLang:
				bad("%s: an RL phase that trains LoRA publishes adapters, and SGLang's update_weights_from_disk loads the base weights alone; use vLLM with shared_disk", where)
			case !s.SharedDisk:
				bad("%s: an RL phase that trains LoRA publishes each adapter as a folder vLLM loads from its own disk (/v1/load_lora_adapter), so it must read the trainer's disk at the same paths: set shared_disk: true (one host or a shared file system)", where)
			}
		}
		if publish&PublishWeights != 0 {
			switch {
			case s.Dialect == VLLM:
				bad("%s: the trainer publishes full weights after every update of an RL phase without lora, and vLLM has no stock route to load them (it loads LoRA adapters: train the phase with a lora block); use agentrl serve, or SGLang with shared_disk", where)
			case s.Dialect == SGLang && !s.SharedDisk:
				bad("%s: an RL phase publishes weights after every update; an SGLang server loads them from disk, so it must read the trainer's disk at the same paths: set shared_disk: true (one host or a shared file system), or use agentrl serve", where)
			case s.Dialect == Agentrl && s.Key == "":
				bad("%s.api_key: agentrl serve accepts weights only with its API key; set api_key: ${NAME} and export the key as NAME", where)
			}
		}
	}
	return errors.Join(errs...)
}

// Options resolves the servers' keys from the environment and returns the router's options.
func (c *Config) Options() (Options, error) {
	opts := Options{Timeout: c.Timeout, Attempts: c.Attempts}
	for _, s := range c.Servers {
		srv := s.Server
		if s.Key != "" {
			if !envref.IsRef(s.Key) {
				return opts, fmt.Errorf("remote: server %s: api_key must be ${NAME}", s.Name)
			}
			v, err := envref.Resolve(s.Key)
			if err != nil {
				return opts, fmt.Errorf("remote: server %s: api_key: %w", s.Name, err)
			}
			srv.APIKey = v
		}
		opts.Servers = append(opts.Servers, srv)
	}
	return opts, nil
}
