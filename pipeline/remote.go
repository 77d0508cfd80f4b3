package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/dataset"
	"github.com/agentrl/agentrl/env/remote"
)

// Train runs the phases, evaluating on held-out tasks before training and after each phase.
// A run opened by Resume continues where its latest checkpoint left off. The environments the
// configuration defines (entries with a remote or a tasks block) are opened first and registered
// under their names beside Options.Envs, for this run only; when every server of a remote one
// stops answering for its unreachable window, the run stops with that error.
func (r *Run) Train(ctx context.Context) (*Summary, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	user, err := OpenUserEnvs(ctx, r.opts.Envs, r.Cfg, func(err error) { cancel(err) })
	if err != nil {
		r.Close()
		return nil, err
	}
	defer func() {
		for _, line := range user.Pools.Describe() {
			r.printf("%s\n", line)
		}
		for _, line := range user.describeJudges() {
			r.printf("%s\n", line)
		}
		user.Close()
	}()
	if err := user.checkExperts(r.Cfg); err != nil {
		r.Close()
		return nil, err
	}
	for _, line := range user.Describe() {
		r.printf("%s\n", line)
	}
	r.opts.Envs = user.Envs
	sum, err := r.train(ctx)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, remote.ErrUnreachable) {
		err = cause
	}
	return sum, err
}

// UserEnvs are the environments a configuration defines, open: remote ones (Pools) and task
// datasets (Data), registered in Envs beside the base registry's.
type UserEnvs struct {
	Envs  *env.Registry
	Pools remote.Pools
	Data  map[string]*dataset.Data
}

// OpenUserEnvs reads the configuration's task datasets and opens its remote environments
// (onDead, when not nil, hears of a remote one none of whose servers answers any more), and
// returns them registered in a copy of base. With none, Envs is base itself.
func OpenUserEnvs(ctx context.Context, base *env.Registry, cfg config.Config, onDead func(error)) (*UserEnvs, error) {
	u := &UserEnvs{Envs: base, Data: map[string]*dataset.Data{}}
	remotes, tasks := cfg.RemoteEnvs(), cfg.TaskEnvs()
	if len(remotes) == 0 && len(tasks) == 0 {
		return u, nil
	}
	u.Envs = base.Clone()
	// The remote environments open first: a dataset whose tools are one's (tasks.tools_from)
	// is given its pool's sessions and metadata.
	pools, err := remote.Register(ctx, u.Envs, remotes, onDead)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	u.Pools = pools
	names := make([]string, 0, len(tasks))
	for n := range tasks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d, err := dataset.Load(tasks[n])
		if err == nil && d.Config.ToolsFrom != "" {
			err = useRemoteTools(d, pools)
		}
		if err == nil {
			err = u.Envs.Register(d.Spec(n))
		}
		if err != nil {
			pools.Close()
			return nil, fmt.Errorf("pipeline: env %s: %w", n, err)
		}
		u.Data[n] = d
	}
	return u, nil
}

// useRemoteTools gives d the sessions and tools of the remote environment its tasks.tools_from
// names.
func useRemoteTools(d *dataset.Data, pools remote.Pools) error {
	name := d.Config.ToolsFrom
	p := pools[name]
	if p == nil {
		return fmt.Errorf("tasks.tools_from %q is not a remote environment of this run", name)
	}
	var tools []dataset.ToolInfo
	for _, t := range p.Metadata().Tools {
		tools = append(tools, dataset.ToolInfo{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	spec := p.Spec()
	return d.UseTools(dataset.ToolProvider{Name: name, New: spec.New, Tools: tools})
}

// Close releases the remote environments' connections.
func (u *UserEnvs) Close() { u.Pools.Close() }

// Describe says what each opened environment is, one line each.
func (u *UserEnvs) Describe() []string {
	var out []string
	names := make([]string, 0, len(u.Data))
	for n := range u.Data {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := u.Data[n]
		line := fmt.Sprintf("env %s: tasks of %s, %d train and %d held-out rows, graded %s", n, d.Config.Path, d.Train, len(d.Tasks)-d.Train, d.Config.Verifier)
		if n := d.Config.ToolsFrom; n != "" {
			line += ", tools from " + n
		}
		if l := d.Levels(); l != nil {
			line += fmt.Sprintf(", levels %v", l)
		}
		if s := d.DescribeSkips(); s != "" {
			line += "; skipped rows: " + s
		}
		out = append(out, line)
	}
	names = names[:0]
	for n := range u.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := u.Pools[n]
		md := p.Metadata()
		out = append(out, fmt.Sprintf("env %s: remote %q at %v, train seeds [%d, %d), held-out [%d, %d), expert %v, %d tools",
			n, md.Name, p.URLs(), md.Train.Lo, md.Train.Hi, md.Heldout.Lo, md.Heldout.Hi, md.Expert, len(md.Tools)))
	}
	return out
}

// describeJudges says how each judge-graded dataset's judgements went, one line each.
func (u *UserEnvs) describeJudges() []string {
	var out []string
	names := make([]string, 0, len(u.Data))
	for n, d := range u.Data {
		if d.Config.Verifier == "judge" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		j, unparseable, timedOut := u.Data[n].JudgeVerdicts()
		out = append(out, fmt.Sprintf("env %s: judge: %d judged, %d unparseable and %d timed out (scored its fallback)", n, j, unparseable, timedOut))
	}
	return out
}

// checkExperts refuses a supervised phase on an environment with no demonstrations: a remote
// one whose servers offer no expert, or a dataset whose answers are not replies (regex,
// json-schema, test-cases). A phase that trains on a file of demonstrations (sft.data) asks no
// expert.
func (u *UserEnvs) checkExperts(cfg config.Config) error {
	for _, p := range cfg.Phases {
		if p.Kind != "sft" || p.SFT != nil && p.SFT.Data != "" {
			continue
		}
		for _, e := range p.Envs {
			if pool := u.Pools[e.Name]; pool != nil && !pool.Metadata().Expert {
				return fmt.Errorf("pipeline: phase %s: env %s: its servers offer no expert (metadata \"expert\": false), so a supervised phase has no demonstrations of it", p.Name, e.Name)
			}
			if d := u.Data[e.Name]; d != nil && !d.Config.HasExpert() {
				return fmt.Errorf("pipeline: phase %s: env %s: a %s-graded dataset's answers are not demonstrations (train the phase on a file of them: sft.data)", p.Name, e.Name, d.Config.Verifier)
			}
		}
	}
	return nil
}
