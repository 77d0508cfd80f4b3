package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrl/agentrl/env/remote"
)

// Train runs the phases, evaluating on held-out tasks before training and after each phase.
// A run opened by Resume continues where its latest checkpoint left off. The run's remote
// environments (entries with a remote block) are opened first, and registered under their names
// beside Options.Envs for this run only; when every server of one stops answering for its
// unreachable window, the run stops with that error.
func (r *Run) Train(ctx context.Context) (*Summary, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pools, err := r.openRemoteEnvs(ctx, cancel)
	if err != nil {
		r.Close()
		return nil, err
	}
	defer func() {
		for _, line := range pools.Describe() {
			r.printf("%s\n", line)
		}
		pools.Close()
	}()
	sum, err := r.train(ctx)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, remote.ErrUnreachable) {
		err = cause
	}
	return sum, err
}

// openRemoteEnvs opens the run's remote environments and makes the run's registry a copy of
// Options.Envs with them. A supervised phase on a remote environment needs its servers' expert.
func (r *Run) openRemoteEnvs(ctx context.Context, stop context.CancelCauseFunc) (remote.Pools, error) {
	defs := r.Cfg.RemoteEnvs()
	if len(defs) == 0 {
		return nil, nil
	}
	reg := r.opts.Envs.Clone()
	pools, err := remote.Register(ctx, reg, defs, func(err error) { stop(err) })
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	for _, p := range r.Cfg.Phases {
		for _, e := range p.Envs {
			if pool := pools[e.Name]; pool != nil && p.Kind == "sft" && !pool.Metadata().Expert {
				pools.Close()
				return nil, fmt.Errorf("pipeline: phase %s: env %s: its servers offer no expert (metadata \"expert\": false), so a supervised phase has no demonstrations of it", p.Name, e.Name)
			}
		}
	}
	for _, n := range r.Cfg.RemoteEnvNames() {
		md := pools[n].Metadata()
		r.printf("env %s: remote %q at %v, train seeds [%d, %d), held-out [%d, %d), expert %v, %d tools\n",
			n, md.Name, defs[n].URLs(), md.Train.Lo, md.Train.Hi, md.Heldout.Lo, md.Heldout.Hi, md.Expert, len(md.Tools))
	}
	r.opts.Envs = reg
	return pools, nil
}
