// Package config is a run's configuration: the typed Config and its blocks (phases, rollout,
// evaluation, checkpoints, rewards, asynchronous RL and its workers, the monitor and its
// actions), the presets, YAML decoding with its strict checks and bounds, --set overrides, the
// rendering `agentrl config show` prints, and validation against the environment registry. It
// holds the settings of the packages a run is made of (their own Config types stay with them)
// and links nothing that runs a loop: pipeline, the CLI, the benchmarks and the environment
// server import it.
package config
