// Package monitor watches the invariants of RL training and acts on them. Measure reads a step's
// sampled episodes into Stats (rewards, behaviour, exploration, the learning signal left after
// filtering, success per difficulty level); Monitor.Check turns the three invariants (exploration,
// learning signal, distribution shift) into warnings that name them; Actions are the actions
// (entropy control, task sampling, shift control) that move settings or draw tasks in response,
// with the State a checkpoint keeps. It reads the learner's typed report (learn.RLReport) and
// the run's configuration (package config) and links no loop: pipeline's loops call it.
package monitor
