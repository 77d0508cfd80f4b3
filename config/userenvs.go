package config

import (
	"errors"
	"fmt"
	"reflect"
	"sort"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/remote"
)

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

// validateUserEnvs checks the remote blocks: each valid, one definition per name, no built-in
// name taken.
func (c *Config) validateUserEnvs(envs *env.Registry) []error {
	var errs []error
	defs := map[string]*remote.PoolConfig{}
	for i, p := range c.Phases {
		for _, e := range p.Envs {
			if e.Remote == nil {
				continue
			}
			where := fmt.Sprintf("phases[%d] (%s): envs: %s", i, p.Name, e.Name)
			if d, ok := defs[e.Name]; ok {
				if !reflect.DeepEqual(*d, *e.Remote) {
					errs = append(errs, fmt.Errorf("%s: remote: defined differently in another phase (give the block once and name the environment alone elsewhere, or repeat it the same)", where))
				}
				continue
			}
			defs[e.Name] = e.Remote
			if _, err := envs.Lookup(e.Name); err == nil {
				errs = append(errs, fmt.Errorf("%s: a registered environment has this name: give the remote one another", where))
			}
			if !nameRE.MatchString(e.Name) {
				errs = append(errs, fmt.Errorf("%s: name must be 1-64 letters, digits, '.', '_' or '-'", where))
			}
			if err := e.Remote.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
			if e.Difficulty != nil {
				errs = append(errs, fmt.Errorf("%s: difficulty: a remote environment has no difficulty levels", where))
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
	return envs.Lookup(name)
}

// ValidateRemoteEnvs checks only the remote blocks (as Validate does), for commands that use only
// that part of a run's configuration.
func (c *Config) ValidateRemoteEnvs(envs *env.Registry) error {
	return errors.Join(c.validateUserEnvs(envs)...)
}
