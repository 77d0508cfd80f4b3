package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
)

// Config attaches the tools of MCP (Model Context Protocol) servers to environments. Each
// server is connected once per run (or per `eval` / `env serve`) and its session is shared by
// every episode; the tools join the environment's own, under its tool limits, and the model sees
// them in the system prompt like the built-in ones.
type Config struct {
	// Servers are the MCP servers, each started over stdio (command) or reached over streamable
	// HTTP (url).
	Servers []Server `yaml:"servers"`
	// Envs maps an environment's name to the servers whose tools it gets.
	Envs map[string][]Attachment `yaml:"envs"`
}

// Server is one MCP server: exactly one of Command (stdio) and URL (streamable HTTP).
type Server struct {
	// Name is how envs refer to the server.
	Name string `yaml:"name"`
	// Command starts the server as a child process speaking MCP over stdin and stdout. A
	// relative path (one with a '/') is taken in Dir when Dir is set; a bare name is looked up
	// in PATH.
	Command string   `yaml:"command,omitempty"`
	Args    []string `yaml:"args,omitempty"`
	// Env is added to the environment the child inherits (a name here wins).
	Env map[string]string `yaml:"env,omitempty"`
	// Dir is the child's working directory (default: this process's).
	Dir string `yaml:"dir,omitempty"`
	// URL is the endpoint of a server speaking streamable HTTP.
	URL string `yaml:"url,omitempty"`
	// Headers are sent with every request to a url server (an API key, an Authorization
	// header). In a value, ${NAME} stands for the environment variable NAME, read when the
	// server is connected: the run's saved config then holds the reference and not the secret,
	// and a resume reads the variable again. An unset variable is an error.
	Headers map[string]string `yaml:"headers,omitempty"`
	// ConnectTimeout bounds starting the server and listing its tools (default 30s).
	ConnectTimeout time.Duration `yaml:"connect_timeout,omitempty"`
}

// Attachment gives an environment the tools of one server.
type Attachment struct {
	Server string `yaml:"server"`
	// Tools, when not empty, keeps only the server's tools with these names (the server's own
	// names, before Prefix).
	Tools []string `yaml:"tools,omitempty"`
	// Prefix is put before every tool name the model sees, to keep them apart from the
	// environment's built-in tools and other servers' tools.
	Prefix string `yaml:"prefix,omitempty"`
}

var (
	// serverNameRE is a server's name (as the run configuration's names are).
	serverNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	envKeyRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	toolPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)
	// headerNameRE is an HTTP field name (RFC 9110's token).
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// headerVarRE is a reference to an environment variable in a header value.
	headerVarRE = regexp.MustCompile(`\$\{([^}]*)\}`)
)

// transportHeaders are the headers the streamable HTTP transport sets itself; replacing them
// would break the protocol.
var transportHeaders = []string{"Accept", "Content-Type", "Content-Length", "Host", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id"}

// Validate reports every problem of the block, naming the setting; used is the set of
// environments the run's phases use.
func (m *Config) Validate(reg *env.Registry, used map[string]bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("mcp."+format, a...)) }
	if len(m.Servers) == 0 {
		bad("servers: at least one server is needed (leave out the mcp block for none)")
	}
	servers := map[string]bool{}
	for i, s := range m.Servers {
		where := fmt.Sprintf("servers[%d] (%s)", i, s.Name)
		if !serverNameRE.MatchString(s.Name) || servers[s.Name] {
			bad("%s: name must be unique and made of letters, digits, '.', '_' or '-'", where)
		}
		servers[s.Name] = true
		switch {
		case s.Command != "" && s.URL != "":
			bad("%s: give command (stdio) or url (streamable HTTP), not both", where)
		case s.Command == "" && s.URL == "":
			bad("%s: give command (stdio) or url (streamable HTTP)", where)
		case s.URL != "":
			if len(s.Args) > 0 || len(s.Env) > 0 || s.Dir != "" {
				bad("%s: args, env and dir do nothing for a url server", where)
			}
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("%s: url %q must be an absolute http:// or https:// address", where, s.URL)
			}
			for _, k := range sortedKeys(s.Headers) {
				if err := checkHeader(k, s.Headers[k]); err != nil {
					bad("%s: headers: %v", where, err)
				}
			}
		default:
			if len(s.Headers) > 0 {
				bad("%s: headers do nothing for a stdio server (give it env)", where)
			}
			for k := range s.Env {
				if !envKeyRE.MatchString(k) {
					bad("%s: env: %q is not a variable name", where, k)
				}
			}
			if s.Dir != "" {
				if st, err := os.Stat(s.Dir); err != nil || !st.IsDir() {
					bad("%s: dir %q is not a directory", where, s.Dir)
				}
			}
		}
		if s.ConnectTimeout < 0 {
			bad("%s: connect_timeout must not be negative", where)
		}
	}
	attached := map[string]bool{}
	for _, name := range sortedKeys(m.Envs) {
		where := "envs." + name
		if _, err := reg.Lookup(name); err != nil {
			bad("%s: %v", where, err)
			continue
		}
		if !used[name] {
			bad("%s: no phase uses environment %s", where, name)
		}
		if len(m.Envs[name]) == 0 {
			bad("%s: list at least one server", where)
		}
		// Names two attachments both give; the full check, against the environment's built-in
		// tools and the servers' listings, is made when the servers are connected.
		names := map[string]string{}
		for j, a := range m.Envs[name] {
			w := fmt.Sprintf("%s[%d]", where, j)
			if !servers[a.Server] {
				bad("%s: server %q is not defined in mcp.servers", w, a.Server)
			}
			attached[a.Server] = true
			if !toolPrefixRE.MatchString(a.Prefix) {
				bad("%s: prefix %q may hold only letters, digits, '.', '_' and '-'", w, a.Prefix)
			}
			seen := map[string]bool{}
			for _, t := range a.Tools {
				if t == "" || seen[t] {
					bad("%s: tools: %q is empty or listed twice", w, t)
				}
				seen[t] = true
				if other, dup := names[a.Prefix+t]; dup {
					bad("%s: tool %q is also given by %s", w, a.Prefix+t, other)
				}
				names[a.Prefix+t] = fmt.Sprintf("mcp.%s (server %s)", w, a.Server)
			}
		}
	}
	for _, s := range m.Servers {
		if s.Name != "" && !attached[s.Name] {
			bad("servers: %s is not attached to any environment (see mcp.envs)", s.Name)
		}
	}
	return errors.Join(errs...)
}

// maxConfigBytes bounds the file Load reads, as the run's configuration is bounded.
const maxConfigBytes = 1 << 20

// Load reads the run configuration at path and returns its mcp block, validated, or nil when it
// has none. The block is decoded strictly (an unknown key is an error); of the rest only the
// environments the phases use are read, to check that the block attaches tools to those. (The
// command line decodes the whole file strictly with the run's own decoder first.)
func Load(reg *env.Registry, path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mcp: read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("mcp: read config: %w", err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("mcp: %s is larger than a configuration may be (%d bytes)", path, maxConfigBytes)
	}
	var doc struct {
		MCP    *strictConfig `yaml:"mcp"`
		Phases []struct {
			Envs []struct {
				Name string `yaml:"name"`
			} `yaml:"envs"`
		} `yaml:"phases"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("mcp: %s: %w", path, err)
	}
	if doc.MCP == nil || doc.MCP.c == nil {
		return nil, nil
	}
	c := doc.MCP.c
	used := map[string]bool{}
	for _, p := range doc.Phases {
		for _, e := range p.Envs {
			used[e.Name] = true
		}
	}
	if err := c.Validate(reg, used); err != nil {
		return nil, fmt.Errorf("mcp: %s: invalid mcp block:\n%w", path, err)
	}
	return c, nil
}

// strictConfig decodes an mcp block strictly inside a document decoded leniently.
type strictConfig struct{ c *Config }

func (s *strictConfig) UnmarshalYAML(node ast.Node) error {
	if node.Type() == ast.NullType {
		return nil
	}
	var c Config
	if err := yaml.NodeToValue(node, &c, yaml.Strict()); err != nil {
		return err
	}
	s.c = &c
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Toolbox is a configuration's MCP servers, connected, and the tools each environment gets
// from them. It makes environments with those tools attached (NewEnv); Close ends every
// session. A nil *Toolbox attaches nothing.
type Toolbox struct {
	reg     *env.Registry      // the environments tools are attached to
	clients map[string]*Client // by server name
	byEnv   map[string][]tool.Tool
}

// Connect connects the servers that c attaches to the environments named in envs (to any
// environment when envs is empty), once each, and checks each environment's tool names: a
// server that does not start or list its tools, an allow-listed tool the server lacks, or a tool
// name an environment would hold twice (built-in or from another server) is an error naming it,
// and nothing stays connected. A nil c connects nothing. The caller closes the result.
func Connect(ctx context.Context, reg *env.Registry, c *Config, envs ...string) (*Toolbox, error) {
	t := &Toolbox{reg: reg, clients: map[string]*Client{}, byEnv: map[string][]tool.Tool{}}
	if c == nil {
		return t, nil
	}
	want := map[string]bool{}
	for _, n := range envs {
		want[n] = true
	}
	need := map[string]bool{}
	for name, atts := range c.Envs {
		if len(want) > 0 && !want[name] {
			continue
		}
		for _, a := range atts {
			need[a.Server] = true
		}
	}
	if err := t.connect(ctx, c.Servers, need); err != nil {
		t.Close()
		return nil, err
	}
	for _, name := range sortedKeys(c.Envs) {
		if len(want) > 0 && !want[name] {
			continue
		}
		if err := t.attach(name, c.Envs[name]); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// connect starts the needed servers concurrently; on an error the ones that did connect stay
// in t.clients for the caller to close.
func (t *Toolbox) connect(ctx context.Context, servers []Server, need map[string]bool) error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make([]error, len(servers))
	)
	for i, s := range servers {
		if !need[s.Name] {
			continue
		}
		wg.Go(func() {
			cl, err := connectServer(ctx, s)
			if err != nil {
				errs[i] = fmt.Errorf("mcp server %s: %w", s.Name, err)
				return
			}
			mu.Lock()
			t.clients[s.Name] = cl
			mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkHeader reports what is wrong with a configured header; the value is never shown, as it
// may hold a key.
func checkHeader(name, value string) error {
	if !headerNameRE.MatchString(name) {
		return fmt.Errorf("%q is not a header name", name)
	}
	if canon := http.CanonicalHeaderKey(name); slices.Contains(transportHeaders, canon) {
		return fmt.Errorf("%s is set by the MCP transport and cannot be replaced", canon)
	}
	for _, m := range headerVarRE.FindAllStringSubmatch(value, -1) {
		if !envKeyRE.MatchString(m[1]) {
			return fmt.Errorf("%s: ${%s} is not an environment variable name", name, m[1])
		}
	}
	if strings.ContainsAny(headerVarRE.ReplaceAllString(value, ""), "\r\n\x00") {
		return fmt.Errorf("%s: the value holds a line break or NUL", name)
	}
	return nil
}

// serverHeader is s.Headers with the environment variables they name filled in.
func serverHeader(s Server) (http.Header, error) {
	h := http.Header{}
	for _, k := range sortedKeys(s.Headers) {
		var missing []string
		v := headerVarRE.ReplaceAllStringFunc(s.Headers[k], func(ref string) string {
			name := ref[2 : len(ref)-1]
			val, ok := os.LookupEnv(name)
			if !ok {
				missing = append(missing, name)
			}
			return val
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("header %s: environment variable %s is not set", k, strings.Join(missing, ", "))
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("header %s: the value holds a line break or NUL once its variables are filled in", k)
		}
		h.Set(k, v)
	}
	return h, nil
}

func connectServer(ctx context.Context, s Server) (*Client, error) {
	opts := Options{ConnectTimeout: s.ConnectTimeout}
	if s.URL != "" {
		h, err := serverHeader(s)
		if err != nil {
			return nil, err
		}
		opts.Header = h
		return ConnectHTTP(ctx, s.URL, opts)
	}
	cmd := exec.Command(s.Command, s.Args...)
	cmd.Dir = s.Dir
	if len(s.Env) > 0 {
		cmd.Env = os.Environ()
		for _, k := range sortedKeys(s.Env) {
			cmd.Env = append(cmd.Env, k+"="+s.Env[k])
		}
	}
	return ConnectExec(ctx, cmd, opts)
}

// attach selects environment name's tools and checks their names against each other and the
// environment's built-in tools, which one instance (made and closed here) reveals.
func (t *Toolbox) attach(name string, atts []Attachment) error {
	from := map[string]string{} // tool name -> where it comes from
	spec, err := t.reg.Lookup(name)
	if err != nil {
		return err
	}
	probe, err := spec.New()
	if err != nil {
		return fmt.Errorf("mcp.envs.%s: make the environment to check its tool names: %w", name, err)
	}
	for _, bt := range env.ToolsOf(probe) {
		from[bt.Name()] = "the built-in tool"
	}
	if c, ok := probe.(env.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("mcp.envs.%s: close the environment made to check its tool names: %w", name, err)
		}
	}
	var tools []tool.Tool
	for j, a := range atts {
		where := fmt.Sprintf("mcp.envs.%s[%d] (server %s)", name, j, a.Server)
		cl := t.clients[a.Server]
		if cl == nil {
			return fmt.Errorf("%s: server is not connected", where)
		}
		sel, err := cl.Select(a.Prefix, a.Tools)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(sel) == 0 {
			return fmt.Errorf("%s: the server lists no tools", where)
		}
		for _, st := range sel {
			if other, dup := from[st.Name()]; dup {
				return fmt.Errorf("%s: tool %q clashes with %s %q in environment %s; set a prefix or a tools allow-list", where, st.Name(), other, st.Name(), name)
			}
			from[st.Name()] = fmt.Sprintf("the tool of mcp.envs.%s[%d] (server %s)", name, j, a.Server)
		}
		tools = append(tools, sel...)
	}
	t.byEnv[name] = tools
	return nil
}

// Tools returns the MCP tools attached to environment name, in the configured order.
func (t *Toolbox) Tools(name string) []tool.Tool {
	if t == nil {
		return nil
	}
	return t.byEnv[name]
}

// NewEnv makes a fresh instance of the registered environment name with its MCP tools attached.
// It is a rollout.EnvFactory.
func (t *Toolbox) NewEnv(name string) (env.Env, error) {
	spec, err := t.reg.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.attachTo(spec.New, name)
}

// Spec returns spec with its New, and its levels' New, attaching the MCP tools configured for
// spec.Name.
func (t *Toolbox) Spec(spec env.Spec) env.Spec {
	if len(t.Tools(spec.Name)) == 0 {
		return spec
	}
	inner := spec.New
	spec.New = func() (env.Env, error) { return t.attachTo(inner, spec.Name) }
	if at := spec.AtLevel; at != nil {
		spec.AtLevel = func(l int) env.Spec { return t.Spec(at(l)) }
	}
	return spec
}

func (t *Toolbox) attachTo(newEnv func() (env.Env, error), name string) (env.Env, error) {
	e, err := newEnv()
	if err != nil {
		return nil, err
	}
	tools := t.Tools(name)
	if len(tools) == 0 {
		return e, nil
	}
	out, err := env.AttachTools(e, tools)
	if err != nil {
		if c, ok := e.(env.Closer); ok {
			_ = c.Close()
		}
		return nil, fmt.Errorf("mcp: attach MCP tools to %s: %w", name, err)
	}
	return out, nil
}

// Factory is NewEnv as a rollout.EnvFactory; nil (the registry's environments) when nothing is
// attached.
func (t *Toolbox) Factory() func(name string) (env.Env, error) {
	if t == nil || len(t.byEnv) == 0 {
		return nil
	}
	return t.NewEnv
}

// Close ends every session (and stops every stdio server, each of which may take its grace
// period to exit, so they are closed together) and reports what failed.
func (t *Toolbox) Close() error {
	if t == nil {
		return nil
	}
	names := sortedKeys(t.clients)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			if err := t.clients[name].Close(); err != nil {
				errs[i] = fmt.Errorf("mcp server %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Describe is a line for the run's log naming what each environment got.
func (t *Toolbox) Describe() string {
	if t == nil || len(t.byEnv) == 0 {
		return ""
	}
	var parts []string
	for _, name := range sortedKeys(t.byEnv) {
		names := make([]string, len(t.byEnv[name]))
		for i, tl := range t.byEnv[name] {
			names[i] = tl.Name()
		}
		parts = append(parts, fmt.Sprintf("%s gets %s", name, strings.Join(names, ", ")))
	}
	return "mcp tools: " + strings.Join(parts, "; ")
}
