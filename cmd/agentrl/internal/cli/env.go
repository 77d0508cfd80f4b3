package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/env/remote"
)

// EnvCmd lists and serves environments.
type EnvCmd struct {
	List  EnvListCmd  `cmd:"" help:"List registered environments with their seed ranges."`
	Serve EnvServeCmd `cmd:"" help:"Serve an environment over HTTP (OpenEnv-style /reset /step /state /health /metadata /schema)."`
}

// EnvListCmd prints every registered environment.
type EnvListCmd struct {
	JSON   bool   `help:"Print one JSON object per environment instead of a table."`
	Config string `help:"Run configuration (YAML) whose remote environments to list too; their servers are asked for their metadata." type:"existingfile" placeholder:"FILE"`
}

// Run prints the registry.
func (c *EnvListCmd) Run(g *Globals) error {
	g, user, err := withConfiguredEnvs(g, "env list", c.Config) // userenvs.go
	if err != nil {
		return err
	}
	defer user.Close()
	names := g.Envs.Names()
	if c.JSON {
		enc := json.NewEncoder(g.Stdout)
		for _, n := range names {
			s, err := g.Envs.Lookup(n)
			if err != nil {
				return err
			}
			md := remote.Metadata{Protocol: remote.ProtocolVersion, Name: s.Name, Description: s.Description,
				Train: remote.Range{Lo: s.Train.Lo, Hi: s.Train.Hi}, Heldout: remote.Range{Lo: s.Heldout.Lo, Hi: s.Heldout.Hi}}
			if p := user.Pools[n]; p != nil {
				md = p.Metadata()
				md.Name = n // the run's name for it; the servers' is in the description
				md.Description = fmt.Sprintf("remote %q: %s", p.Metadata().Name, p.Metadata().Description)
			}
			if err := enc.Encode(md); err != nil {
				return fmt.Errorf("env list: %w", err)
			}
		}
		return nil
	}
	if len(names) == 0 {
		_, err := fmt.Fprintln(g.Stdout, "no environments registered")
		return err
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTRAIN SEEDS\tHELD-OUT SEEDS\tDESCRIPTION")
	for _, n := range names {
		s, err := g.Envs.Lookup(n)
		if err != nil {
			return err
		}
		desc := s.Description
		if p := user.Pools[n]; p != nil {
			md := p.Metadata()
			desc = fmt.Sprintf("remote %q at %s (%d tools, expert %v): %s", md.Name, strings.Join(p.URLs(), ", "), len(md.Tools), md.Expert, desc)
		}
		fmt.Fprintf(tw, "%s\t[%d, %d)\t[%d, %d)\t%s\n", s.Name, s.Train.Lo, s.Train.Hi, s.Heldout.Lo, s.Heldout.Hi, desc)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("env list: %w", err)
	}
	return nil
}

// EnvServeCmd serves one environment until interrupted.
type EnvServeCmd struct {
	Env          string        `required:"" help:"Environment to serve (see 'env list')." placeholder:"NAME"`
	Addr         string        `default:"127.0.0.1:8931" help:"Listen address; loopback unless --allow-remote."`
	IdleTimeout  time.Duration `default:"10m" help:"End sessions idle for this long."`
	MaxSessions  int           `default:"256" help:"Most sessions open at once; more get 503."`
	MaxBodyBytes int64         `default:"8388608" help:"Largest request body; larger gets 413."`
	StepTimeout  time.Duration `default:"0s" help:"Bound on one reset or step of the environment (0: none)."`
	AllowRemote  bool          `help:"Allow a non-loopback listen address. The protocol has no authentication: put it behind a proxy that adds it."`
	Config       string        `help:"Run configuration (YAML) whose mcp block attaches MCP servers' tools to --env, connected once and shared by every session; its other settings are not used." type:"existingfile" placeholder:"FILE"`

	// Sharing the server: sessions left open, and connections that trickle.
	EvictIdle         time.Duration `default:"30s" help:"When every session is taken, a reset ends the least recently used session idle at least this long; its client is told on its next call (0 or negative: never evict, a full server answers 503)."`
	ReadHeaderTimeout time.Duration `default:"10s" help:"Bound on reading a request's headers."`
	ReadTimeout       time.Duration `default:"1m" help:"Bound on reading a whole request, body included: a client that trickles its request is disconnected."`
	WriteTimeout      time.Duration `default:"0s" help:"Bound on a request from its headers to the end of the answer, the environment's work included (0: --step-timeout plus 1m, or 10m without one)."`
	ConnIdleTimeout   time.Duration `default:"2m" help:"Close a keep-alive connection idle this long between requests."`
}

// Run serves until g.Ctx ends, then shuts down gracefully.
func (c *EnvServeCmd) Run(g *Globals) (err error) {
	spec, err := g.Envs.Lookup(c.Env)
	if err != nil {
		return err
	}
	if c.IdleTimeout <= 0 || c.MaxSessions <= 0 || c.MaxBodyBytes <= 0 || c.StepTimeout < 0 {
		return fmt.Errorf("env serve: --idle-timeout, --max-sessions and --max-body-bytes must be positive, --step-timeout not negative")
	}
	if c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0 || c.WriteTimeout < 0 || c.ConnIdleTimeout <= 0 {
		return fmt.Errorf("env serve: --read-header-timeout, --read-timeout and --conn-idle-timeout must be positive, --write-timeout not negative")
	}
	evict := c.EvictIdle
	if evict <= 0 {
		evict = -1 // never (ServerOptions reads 0 as its default)
	}
	tools, err := connectMCP(g, "env serve", c.Config, c.Env)
	if err != nil {
		return err
	}
	// Closed once Serve has returned, which closes every session's environment first.
	defer func() {
		if cerr := tools.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("env serve: %w", cerr)
		}
	}()
	spec = tools.Spec(spec)
	srv, err := remote.NewServer(spec, remote.ServerOptions{IdleTimeout: c.IdleTimeout, MaxSessions: c.MaxSessions,
		MaxBodyBytes: c.MaxBodyBytes, StepTimeout: c.StepTimeout, EvictIdle: evict,
		ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout, ConnIdleTimeout: c.ConnIdleTimeout})
	if err != nil {
		return err
	}
	ln, err := remote.Listen(c.Addr, c.AllowRemote)
	if err != nil {
		srv.Close()
		return err
	}
	fmt.Fprintf(g.Stdout, "serving %s on http://%s (idle timeout %v, max sessions %d)\n", spec.Name, ln.Addr(), c.IdleTimeout, c.MaxSessions)
	if err := srv.Serve(g.Ctx, ln); err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "stopped serving %s\n", spec.Name)
	return nil
}
