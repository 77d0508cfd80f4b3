package cli

import (
	"context"
	"fmt"
	"net"

	"github.com/agentrl/agentrl/dashboard"
)

// DashboardCmd serves the dashboard of run directories.
type DashboardCmd struct {
	Runs   []string `arg:"" optional:"" help:"Run directories (or a folder of them, such as runs/); default runs/." type:"existingdir" placeholder:"DIR"`
	Addr   string   `default:"127.0.0.1:8090" help:"Listen address. A non-loopback address needs --public and a key."`
	Public bool     `help:"Allow a non-loopback address (a key is still required)."`
	Key    string   `env:"AGENTRL_DASHBOARD_KEY" help:"Key required to open the page (once as ?key=KEY) and its API (Authorization: Bearer KEY)." placeholder:"KEY"`
}

// Run serves until interrupted.
func (c *DashboardCmd) Run(g *Globals) error {
	runs := c.Runs
	if len(runs) == 0 {
		runs = []string{"runs"}
	}
	if err := dashboard.CheckAddr(c.Addr, c.Public, c.Key != ""); err != nil {
		return err
	}
	srv, err := dashboard.New(runs, dashboard.Options{Key: c.Key})
	if err != nil {
		return err
	}
	return srv.Serve(g.Ctx, c.Addr, func(a net.Addr) {
		fmt.Fprintf(g.Stdout, "dashboard of %d runs on http://%s/ (Prometheus metrics on /metrics)\n", len(srv.Runs()), a)
	})
}

// serveDashboard serves the dashboard of one run in the background (train --dashboard); stop
// ends it.
func serveDashboard(g *Globals, addr string, public bool, key, dir string) (stop func(), err error) {
	if err := dashboard.CheckAddr(addr, public, key != ""); err != nil {
		return nil, err
	}
	srv, err := dashboard.New([]string{dir}, dashboard.Options{Key: key})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(g.Ctx)
	up := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := srv.Serve(ctx, addr, func(a net.Addr) {
			fmt.Fprintf(g.Stderr, "dashboard on http://%s/ (Prometheus metrics on /metrics)\n", a)
			up <- nil
		})
		if err != nil {
			up <- err
		}
	}()
	if err := <-up; err != nil {
		cancel()
		return nil, err
	}
	return func() { cancel(); <-done }, nil
}
