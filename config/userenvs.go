package config

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"sort"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/dataset"
	"github.com/agentrl/agentrl/env/remote"
)

func allLevels() []int {
	out := make([]int, env.MaxLevel)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// RemoteEnvs returns the environments the run's phases define by a remote block, by name. One
// name may be defined in several phases' entries only with the same block; an entry without a
// block names one defined elsewhere in the run, or a registered environment.
func (c *Config) RemoteEnvs() map[string]remote.PoolConfig {
	out := map[string]remote.PoolConfig{}
	for _, p := range c.Phases {
		for _, e := range p.Envs {
			if e.Remote != nil {
				if _, ok := out[e.Name]; !ok {
					out[e.Name] = *e.Remote
				}
			}
		}
	}
	return out
}

// RemoteEnvNames lists RemoteEnvs' names, sorted.
func (c *Config) RemoteEnvNames() []string {
	m := c.RemoteEnvs()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TaskEnvs returns the environments the run's phases define by a tasks block, by name, as
// RemoteEnvs does for remote blocks.
func (c *Config) TaskEnvs() map[string]dataset.Config {
	out := map[string]dataset.Config{}
	for _, p := range c.Phases {
		for _, e := range p.Envs {
			if e.Tasks != nil {
				if _, ok := out[e.Name]; !ok {
					out[e.Name] = *e.Tasks
				}
			}
		}
	}
	return out
}

// validateUserEnvs checks the remote and tasks blocks: each valid, one definition per name, no
// registered name taken.
func (c *Config) validateUserEnvs(envs *env.Registry) []error {
	var errs []error
	type def struct {
		remote *remote.PoolConfig
		tasks  *dataset.Config
	}
	defs := map[string]def{}
	for i, p := range c.Phases {
		for _, e := range p.Envs {
			if e.Remote == nil && e.Tasks == nil {
				continue
			}
			where := fmt.Sprintf("phases[%d] (%s): envs: %s", i, p.Name, e.Name)
			if e.Remote != nil && e.Tasks != nil {
				errs = append(errs, fmt.Errorf("%s: give remote or tasks, not both", where))
				continue
			}
			d := def{e.Remote, e.Tasks}
			if old, ok := defs[e.Name]; ok {
				if !reflect.DeepEqual(old, d) {
					errs = append(errs, fmt.Errorf("%s: defined differently in another phase (give the block once and name the environment alone elsewhere, or repeat it the same)", where))
				}
				continue
			}
			defs[e.Name] = d
			if _, err := envs.Lookup(e.Name); err == nil {
				errs = append(errs, fmt.Errorf("%s: a registered environment has this name: give yours another", where))
			}
			if !nameRE.MatchString(e.Name) {
				errs = append(errs, fmt.Errorf("%s: name must be 1-64 letters, digits, '.', '_' or '-'", where))
			}
			if e.Remote != nil {
				if err := e.Remote.Validate(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
				}
				if e.Difficulty != nil {
					errs = append(errs, fmt.Errorf("%s: difficulty: a remote environment has no difficulty levels", where))
				}
			}
			if t := e.Tasks; t != nil {
				if err := t.Validate(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
				} else if _, err := os.Stat(t.Path); err != nil {
					errs = append(errs, fmt.Errorf("%s: tasks.path: %w", where, err))
				}
				if n := t.ToolsFrom; n != "" {
					if _, ok := c.RemoteEnvs()[n]; !ok {
						errs = append(errs, fmt.Errorf("%s: tasks.tools_from %q is not a remote environment of this run (remote ones: %v)", where, n, c.RemoteEnvNames()))
					}
				}
				if e.Difficulty != nil && t.Level == "" {
					errs = append(errs, fmt.Errorf("%s: difficulty: the dataset has no levels (set tasks.level to the field holding them)", where))
				}
			}
		}
	}
	return errs
}

// lookupEnv finds the environment an entry names: one the run defines by a remote block, or one
// in envs. A remote environment's seed ranges are known only once its servers answer, so its
// spec here has only its name.
func (c *Config) lookupEnv(envs *env.Registry, name string) (env.Spec, error) {
	if _, ok := c.RemoteEnvs()[name]; ok {
		return env.Spec{Name: name}, nil
	}
	if t, ok := c.TaskEnvs()[name]; ok && t.Level != "" {
		// The levels are known once the file is read; any level the configuration draws at is
		// checked against them then.
		return env.Spec{Name: name, Levels: allLevels()}, nil
	} else if ok {
		return env.Spec{Name: name}, nil
	}
	return envs.Lookup(name)
}

// ValidateUserEnvs checks only the remote and tasks blocks (as Validate does), for commands that use only
// that part of a run's configuration.
func (c *Config) ValidateUserEnvs(envs *env.Registry) error {
	return errors.Join(c.validateUserEnvs(envs)...)
}

// withUserEnvs returns envs with the environments the run defines (remote and task datasets)
// registered under their names, as stand-ins for checks that need only the names (the mcp
// block's attachments); envs itself when the run defines none.
func (c *Config) withUserEnvs(envs *env.Registry) *env.Registry {
	names := c.RemoteEnvNames()
	for n := range c.TaskEnvs() {
		names = append(names, n)
	}
	if len(names) == 0 {
		return envs
	}
	reg := envs.Clone()
	for _, n := range names {
		_ = reg.Register(env.Spec{ // a name a registered environment has is refused by validateUserEnvs
			Name:    n,
			New:     func() (env.Env, error) { return nil, fmt.Errorf("env %s: opened when the run starts", n) },
			Expert:  func(int64, float64, *rand.Rand) env.Agent { return nil },
			Corpus:  func(int) []string { return nil },
			Train:   env.SeedRange{Lo: 0, Hi: 1},
			Heldout: env.SeedRange{Lo: 1, Hi: 2},
		})
	}
	return reg
}
