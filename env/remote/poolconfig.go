package remote

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/agentrl/agentrl/internal/envref"
)

// Bounds and defaults of a PoolConfig.
const (
	DefaultPoolTimeout     = 60 * time.Second
	DefaultPoolMaxSessions = 64
	DefaultUnreachable     = 2 * time.Minute
	MaxReplicas            = 64
	MaxPoolSessions        = 4096
	MaxPoolTimeout         = time.Hour
)

// PoolConfig is the `remote:` block of an environment entry: the servers of one environment
// (url, and any further replicas serving the same environment), the key they want, and how the
// run talks to them. Zero fields take the defaults in parentheses.
type PoolConfig struct {
	// URL is the server's base address, http://host:port (with Replicas, may be empty).
	URL string `yaml:"url,omitempty"`
	// Replicas are further servers of the same environment; episodes go to the one with the
	// fewest sessions in use.
	Replicas []string `yaml:"replicas,omitempty"`
	// APIKey is "${NAME}": the environment variable NAME holds the key, sent as
	// "Authorization: Bearer <key>".
	APIKey string `yaml:"api_key,omitempty"`
	// Timeout bounds each request to a server (60s).
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// MaxSessions bounds the episodes open at once on each server (64; lower when the server's
	// metadata says it holds fewer).
	MaxSessions int `yaml:"max_sessions,omitempty"`
	// Unreachable is how long no server may answer before the run stops (2m).
	Unreachable time.Duration `yaml:"unreachable,omitempty"`
}

// URLs lists the servers: URL first, then Replicas.
func (c PoolConfig) URLs() []string {
	var out []string
	if c.URL != "" {
		out = append(out, c.URL)
	}
	return append(out, c.Replicas...)
}

// Validate reports every problem of the block, each naming its setting.
func (c PoolConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("remote."+format, a...)) }
	urls := c.URLs()
	if len(urls) == 0 {
		bad("url: give the server's address (http://host:port), or replicas")
	}
	if len(urls) > MaxReplicas {
		bad("replicas: %d servers, at most %d", len(urls), MaxReplicas)
	}
	seen := map[string]bool{}
	for _, s := range urls {
		if err := checkBaseURL(s); err != nil {
			bad("url %q: %v", s, err)
		}
		if seen[s] {
			bad("replicas: %s is listed twice", s)
		}
		seen[s] = true
	}
	if c.APIKey != "" && !envref.IsRef(c.APIKey) {
		bad("api_key: write ${NAME} and put the key in the environment variable NAME, so the saved configuration does not hold it")
	}
	if c.Timeout < 0 || c.Timeout > MaxPoolTimeout {
		bad("timeout %v must be in [0, %v] (0: %v)", c.Timeout, MaxPoolTimeout, DefaultPoolTimeout)
	}
	if c.MaxSessions < 0 || c.MaxSessions > MaxPoolSessions {
		bad("max_sessions %d must be in [0, %d] (0: %d)", c.MaxSessions, MaxPoolSessions, DefaultPoolMaxSessions)
	}
	if c.Unreachable < 0 || c.Unreachable > 24*time.Hour {
		bad("unreachable %v must be in [0, 24h] (0: %v)", c.Unreachable, DefaultUnreachable)
	}
	return errors.Join(errs...)
}

func (c PoolConfig) withDefaults() PoolConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultPoolTimeout
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultPoolMaxSessions
	}
	if c.Unreachable == 0 {
		c.Unreachable = DefaultUnreachable
	}
	return c
}

func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want http://host:port or https://host:port")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("a base address has no query, fragment or credentials (give the key as api_key)")
	}
	return nil
}
