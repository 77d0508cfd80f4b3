// Command agentrl trains, serves and evaluates LLM agents with reinforcement learning.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentrl/agentrl/cmd/agentrl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentrl:", err)
		os.Exit(cli.ExitCode(err))
	}
}
