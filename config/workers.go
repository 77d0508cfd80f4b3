package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/internal/envref"
)

// WorkersConfig makes an asynchronous RL phase's episodes run on rollout workers (`agentrl
// worker`) through the NATS data plane (package dist, docs/wire.md) instead of the in-process
// engine. Exactly one of Listen and URL is set.
type WorkersConfig struct {
	// Listen starts a NATS server inside the learner on host:port (port 0 picks one, kept for a
	// resumed run), its store under the run directory (dist/). The workers' token and the URL
	// are written to dist/ and printed.
	Listen string `yaml:"listen,omitempty"`
	// URL connects to a running NATS server with JetStream (nats://host:port).
	URL string `yaml:"url,omitempty"`
	// Token names an environment variable as ${NAME}; tokens are never written in a config.
	// With URL it holds the learner's token (none: the server needs none, or it is in the URL);
	// with Listen it holds the token workers must present (none: one is generated and kept in
	// the run directory).
	Token string `yaml:"token,omitempty"`
	// NKey names, as ${NAME}, an environment variable holding the learner's NKey seed ("SU…"),
	// for a server at URL whose learner user authenticates by NKey (instead of Token).
	NKey string `yaml:"nkey,omitempty"`
	// WorkerNKeys are the public NKeys ("U…", not secret) of workers that may join the server the
	// learner embeds (Listen) by signing its nonce with their seed (`agentrl worker --nkey FILE`),
	// besides those that present the workers' token. `agentrl nkey` makes a key pair.
	WorkerNKeys []string `yaml:"worker_nkeys,omitempty"`
	// Run names the run on the wire, what workers pass as --run (default: the run directory's
	// name, its other characters replaced by '-').
	Run string `yaml:"run,omitempty"`
	// TaskAckWait is how long a killed worker's task waits before another worker gets it
	// (default 30s).
	TaskAckWait time.Duration `yaml:"task_ack_wait,omitempty"`
	// GroupTimeout is how long the learner waits for a step's groups to fill once it needs them
	// (default 10m). Then a group with at least two members (one when group_size is 1) is trained
	// as it is and a smaller one is dropped (dist/dropped_group_timeout); its late members are
	// dropped as they come (dist/filtered_late).
	GroupTimeout time.Duration `yaml:"group_timeout,omitempty"`
}

// maxWorkerGroups bounds groups_per_step × dynamic_sampling.max_rounds with workers: a step's
// groups are numbered in 16 bits on the wire, and task_sampling's oversample draws up to 8 times
// the groups a round misses.
const maxWorkerGroups = 1 << 13

func (w *WorkersConfig) validate(r *RLConfig) error {
	switch {
	case (w.Listen == "") == (w.URL == ""):
		return errors.New("rl.async.workers: set exactly one of listen (host:port, a server in the learner) and url (nats://host:port, a running server)")
	case w.Token != "" && !envref.IsRef(w.Token):
		return errors.New("rl.async.workers.token must name an environment variable as ${NAME}: tokens are never written in a run's config")
	case w.NKey != "" && !envref.IsRef(w.NKey):
		return errors.New("rl.async.workers.nkey must name an environment variable as ${NAME} holding the seed: seeds are never written in a run's config")
	case w.NKey != "" && (w.URL == "" || w.Token != ""):
		return errors.New("rl.async.workers.nkey is the learner's credential for a server at url, instead of token")
	case len(w.WorkerNKeys) > 0 && w.Listen == "":
		return errors.New("rl.async.workers.worker_nkeys configures the server the learner embeds (listen); an external server lists its users itself (docs/wire.md)")
	case w.TaskAckWait < 0 || w.GroupTimeout < 0:
		return errors.New("rl.async.workers: task_ack_wait and group_timeout must not be negative")
	case r.DynamicSampling != nil && r.GroupsPerStep*r.DynamicSampling.MaxRounds > maxWorkerGroups:
		return fmt.Errorf("rl.async.workers: groups_per_step %d × dynamic_sampling.max_rounds %d groups a step exceed the %d the data plane numbers (with task_sampling's oversample up to 8 times that)",
			r.GroupsPerStep, r.DynamicSampling.MaxRounds, maxWorkerGroups)
	}
	if w.Listen != "" {
		host, port, err := net.SplitHostPort(w.Listen)
		if err != nil {
			return fmt.Errorf("rl.async.workers.listen: %w", err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 || host == "" {
			return fmt.Errorf("rl.async.workers.listen: want host:port, got %q", w.Listen)
		}
	} else if !strings.HasPrefix(w.URL, "nats://") && !strings.HasPrefix(w.URL, "tls://") {
		return fmt.Errorf("rl.async.workers.url: want nats://host:port, got %q", w.URL)
	}
	for i, k := range w.WorkerNKeys {
		if !nkeys.IsValidPublicUserKey(k) {
			return fmt.Errorf("rl.async.workers.worker_nkeys[%d]: %q is not a public user NKey (U…, 56 characters); never put a seed (SU…) in a config", i, k)
		}
	}
	if w.Run != "" {
		if err := dist.CheckRun(w.Run); err != nil {
			return fmt.Errorf("rl.async.workers.run: %w", err)
		}
	}
	return nil
}

// token is the value of the environment variable Token names ("" without one).
func (w *WorkersConfig) TokenValue() (string, error) {
	if w.Token == "" {
		return "", nil
	}
	v, err := envref.Resolve(w.Token)
	if err != nil {
		return "", fmt.Errorf("rl.async.workers.token: %w", err)
	}
	return v, nil
}

// NKeySeed is the value of the environment variable NKey names ("" without one).
func (w *WorkersConfig) NKeySeed() (string, error) {
	if w.NKey == "" {
		return "", nil
	}
	v, err := envref.Resolve(w.NKey)
	if err != nil {
		return "", fmt.Errorf("rl.async.workers.nkey: %w", err)
	}
	return v, nil
}
