// Package cli implements the agentrl command line: one file per subcommand.
// Every command writes through the io.Writers it is given so tests can read its output.
package cli

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/alecthomas/kong"
)

// Globals is what every subcommand's Run receives.
type Globals struct {
	Ctx    context.Context
	Stdout io.Writer
	Stderr io.Writer
	// Envs holds the environments commands may name.
	Envs *env.Registry
}

// CLI is the command tree.
type CLI struct {
	Train     TrainCmd     `cmd:"" help:"Train a policy (default: the built-in calc task with the built-in model)."`
	Eval      EvalCmd      `cmd:"" help:"Evaluate a checkpoint on held-out tasks (pass@1, pass@k)."`
	Config    ConfigCmd    `cmd:"" help:"Inspect configuration."`
	Env       EnvCmd       `cmd:"" help:"List and serve environments."`
	Serve     ServeCmd     `cmd:"" help:"Serve a checkpoint as an OpenAI-compatible HTTP server (completions, chat with tools, the agentrl token route, weight updates)."`
	Traj      TrajCmd      `cmd:"" help:"List, replay and export a run's trajectories."`
	Dashboard DashboardCmd `cmd:"" help:"Serve a local web page of runs: curves, invariants, comparison, trajectories; and Prometheus metrics."`
	Replay    ReplayCmd    `cmd:"" help:"Train a run's RL phases again from its recorded trajectories, without environments, and compare the metrics."`
	Bench     BenchCmd     `cmd:"" help:"Measure performance."`
	Worker    WorkerCmd    `cmd:"" help:"Run episodes for a distributed run: take tasks from the learner's NATS server, store trajectories."`
	Tokenize  TokenizeCmd  `cmd:"" help:"Print the token ids and pieces of a text, or of a conversation rendered with the tokenizer's chat template."`
	NKey      NKeyCmd      `cmd:"" name:"nkey" help:"Make an NKey key pair for a worker: the seed to a file, the public key to stdout."`
	Help      HelpCmd      `cmd:"" help:"Show help for agentrl or one of its commands."`

	Version kong.VersionFlag `help:"Print the version (module, commit, Go) and exit."`
}

// Main parses args and runs the chosen subcommand with the built-in environments. ExitCode
// gives the process status for what it returns.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return mainWith(ctx, args, stdout, stderr, all.Builtins())
}

// mainWith is Main with the environments of envs.
func mainWith(ctx context.Context, args []string, stdout, stderr io.Writer, envs *env.Registry) error {
	var root CLI
	exitCode := -1
	parser, err := kong.New(&root,
		kong.Name("agentrl"),
		kong.Description("Agentic reinforcement learning: environments, tools, rollouts and policy optimization in one loop."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exitCode = code }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Vars{"presets": strings.Join(config.Presets(), ", "), "version": Version()},
	)
	if err != nil {
		return err
	}
	kctx, err := parser.Parse(args)
	if exitCode >= 0 { // --help or similar printed and asked to exit
		if exitCode == 0 {
			return nil
		}
		return errors.New("invalid command line")
	}
	if err != nil {
		return err
	}
	err = kctx.Run(&Globals{Ctx: ctx, Stdout: stdout, Stderr: stderr, Envs: envs})
	if exitCode == 0 { // `help` printed the help asked for
		return nil
	}
	return asInterrupted(ctx, err)
}
