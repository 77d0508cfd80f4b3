package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentrl/agentrl"

// rule says that no package under one of the subjects links a package under one of forbid, directly
// or through other project packages. A path stands for itself and its sub-packages ("model" covers
// "model/kernels") unless exact is set. "" in forbid means every project package.
type rule struct {
	subjects []string
	exact    bool // the subjects are single packages, not trees
	forbid   []string
	why      string
}

// rules are the import rules of ARCHITECTURE.md. A subject that does not exist yet is skipped, so
// a rule written for a package to come holds from the commit that adds it.
var rules = []rule{
	{
		subjects: []string{"traj"},
		forbid:   []string{""},
		why:      "the trajectory format is what every process exchanges; it must build alone",
	},
	{
		subjects: []string{"algo"},
		forbid:   []string{"model", "infer", "rollout", "learn", "pipeline"},
		why:      "algo is pure math over slices, tested against hand-computed values and finite differences",
	},
	{
		subjects: []string{"env", "tool"},
		forbid:   []string{"model", "rollout", "learn", "pipeline"},
		why:      "environments and tools run in environment servers and sandboxes that never hold a model or a trainer",
	},
	{
		subjects: []string{"model"},
		forbid:   []string{"algo", "optim", "learn", "pipeline"},
		why:      "optim builds on model/kernels, so model -> optim runs the graph back up; losses and updates belong to algo, optim and learn",
	},
	{
		subjects: []string{"infer"},
		exact:    true,
		forbid:   []string{"model"},
		why:      "infer is the Generator contract; rollout workers and remote generators must not link the local engine",
	},
	{
		subjects: []string{"infer/remote"},
		forbid:   []string{"model", "learn", "pipeline"},
		why:      "the remote generator is what a rollout worker on another host links; generation happens on the servers",
	},
	{
		subjects: []string{"infer/wire"},
		forbid:   []string{"model", "infer/local", "infer/remote", "infer/serve"},
		why:      "the generate route's JSON is shared by agentrl serve and the remote generator; it must link only the contract",
	},
	{
		subjects: []string{"rollout"},
		forbid:   []string{"model/kernels"},
		why:      "a rollout worker talks to a Generator; it must not link the kernels of the local engine",
	},
	{
		subjects: []string{"infer/serve"},
		forbid:   []string{"learn", "pipeline", "rollout", "algo"},
		why:      "agentrl serve holds a policy and its engine, never the trainer or the agent loop",
	},
	{
		subjects: []string{"dashboard"},
		forbid:   []string{"pipeline", "learn", "model", "infer", "rollout", "algo", "env", "checkpoint"},
		why:      "the dashboard reads run directories (metrics.jsonl, config.yaml, trajectories.atrs); it must run beside a training, or on a copied run, without linking the trainer or a model",
	},
	{
		subjects: []string{"eval", "env/mcp"},
		forbid:   []string{"learn", "pipeline"},
		why:      "agentrl eval and agentrl env serve must not link the trainer",
	},
	{
		subjects: []string{"tool"},
		forbid:   []string{"env"},
		why:      "tools are a leaf that knows no environment; what attaches tools to environments (the MCP adapter) lives under env",
	},
	{
		subjects: []string{"config"},
		forbid:   []string{"pipeline", "monitor", "cmd", "dashboard"},
		why:      "the run's configuration sits below the loops and the monitor that read it; it holds settings and runs nothing",
	},
	{
		subjects: []string{"monitor"},
		forbid:   []string{"pipeline", "cmd", "dashboard"},
		why:      "the monitor reads a step's learner report and trajectories and returns actions; the loops call it, never the reverse",
	},
	{
		subjects: []string{"internal"},
		forbid:   []string{"pipeline", "cmd"},
		why:      "internal/ holds leaves shared across the house (archtest, envref, httpserve, promtest); the top of the house (the CLI and the benchmarks) lives under cmd/agentrl/internal",
	},
	{
		subjects: []string{"chat"},
		forbid:   []string{"traj", "algo", "reward", "env", "model", "optim", "infer", "checkpoint", "rollout", "learn", "dist", "eval", "dashboard", "pipeline"},
		why:      "chat templates are a leaf over tokenizer and tool: the rollout, agentrl serve and the CLI render with them, and the Conversation meets the rollout loop through rollout's own interface",
	},
	{
		subjects: []string{"hub"},
		forbid:   []string{""},
		why:      "the Hub client is a leaf: config, the pipeline and the command line name checkpoints through it, and it must build (and be audited for where the token goes) alone",
	},
	{
		subjects: []string{"learn/tinker"},
		exact:    true,
		forbid:   []string{"infer/local", "infer/remote", "checkpoint", "pipeline"},
		why:      "a Tinker run's weights, generation and saved state are the service's: its client must not link the local engine, the inference servers' client or the checkpoint files",
	},
	{
		subjects: []string{"dist"},
		forbid:   []string{"model", "infer", "rollout", "env", "checkpoint", "learn", "pipeline"},
		why:      "the data plane carries tasks, trajectories and weight files; the learner and any worker link it without a model or an engine",
	},
}

// pkg is what go list reports of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// graph runs one go list over the module and returns each project package's project imports,
// keyed by path relative to the module ("model/kernels").
func graph(t *testing.T) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Imports,Standard", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		rel, ok := project(p.ImportPath)
		if p.Standard || !ok {
			continue
		}
		var imps []string
		for _, imp := range p.Imports {
			if r, ok := project(imp); ok {
				imps = append(imps, r)
			}
		}
		g[rel] = imps
	}
	if len(g) == 0 {
		t.Fatal("go list found no project packages")
	}
	return g
}

// project returns path relative to the module, and whether it is a project package.
func project(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// under reports whether path is prefix or one of its sub-packages; "" is above every package.
func under(path, prefix string) bool {
	return prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/")
}

// chain returns the shortest import chain from start to a package under one of forbid (start
// first), or nil when there is none.
func chain(g map[string][]string, start string, forbid []string) []string {
	parent := map[string]string{start: start}
	queue := []string{start}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := parent[imp]; seen {
				continue
			}
			parent[imp] = p
			if slices.ContainsFunc(forbid, func(f string) bool { return under(imp, f) }) {
				path := []string{imp}
				for q := p; q != start; q = parent[q] {
					path = append(path, q)
				}
				path = append(path, start)
				slices.Reverse(path)
				return path
			}
			queue = append(queue, imp)
		}
	}
	return nil
}

func TestImportRules(t *testing.T) {
	g := graph(t)
	paths := make([]string, 0, len(g))
	for p := range g {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, r := range rules {
		t.Run(strings.Join(r.subjects, "+"), func(t *testing.T) {
			checked := 0
			for _, p := range paths {
				if !slices.ContainsFunc(r.subjects, func(s string) bool { return p == s || !r.exact && under(p, s) }) {
					continue
				}
				checked++
				if c := chain(g, p, r.forbid); c != nil {
					t.Errorf("%s links %s: %s\n\twhy the rule exists: %s", p, c[len(c)-1], strings.Join(c, " -> "), r.why)
				}
			}
			if checked == 0 {
				t.Skipf("no package %s yet; the rule applies once it exists", strings.Join(r.subjects, " or "))
			}
		})
	}
}

// TestRulesCatchPlantedViolations plants, for every rule, an import from each of its subjects
// to a package it forbids into the module's real graph, and checks that the rule's search finds
// it: a rule that passes is not passing because its subjects or forbidden packages are misnamed.
func TestRulesCatchPlantedViolations(t *testing.T) {
	g := graph(t)
	for _, r := range rules {
		t.Run(strings.Join(r.subjects, "+"), func(t *testing.T) {
			var target string
			for p := range g {
				if slices.ContainsFunc(r.forbid, func(f string) bool { return under(p, f) }) && (target == "" || p < target) {
					target = p
				}
			}
			if target == "" {
				t.Skipf("no package under %v yet", r.forbid)
			}
			planted := 0
			for p := range g {
				if !slices.ContainsFunc(r.subjects, func(s string) bool { return p == s || !r.exact && under(p, s) }) || p == target {
					continue
				}
				planted++
				bad := maps.Clone(g)
				bad[p] = append(slices.Clone(g[p]), target)
				if c := chain(bad, p, r.forbid); c == nil {
					t.Errorf("%s importing %s is not caught", p, target)
				}
			}
			if planted == 0 {
				t.Skipf("no package %s yet", strings.Join(r.subjects, " or "))
			}
		})
	}
}

// TestChain checks the rule machinery on a small graph, so a rule that passes is not passing
// because the search is broken.
func TestChain(t *testing.T) {
	g := map[string][]string{
		"rollout":       {"infer", "traj"},
		"infer":         {"model"},
		"model":         {"model/kernels"},
		"model/kernels": nil,
		"traj":          nil,
	}
	if got, want := chain(g, "rollout", []string{"model/kernels"}), []string{"rollout", "infer", "model", "model/kernels"}; !slices.Equal(got, want) {
		t.Errorf("chain = %v, want %v", got, want)
	}
	if got := chain(g, "rollout", []string{"learn"}); got != nil {
		t.Errorf("chain to an absent package = %v, want none", got)
	}
	if got, want := chain(g, "traj", []string{""}), []string(nil); !slices.Equal(got, want) {
		t.Errorf("traj with no imports: chain = %v", got)
	}
	if got, want := chain(g, "infer", []string{""}), []string{"infer", "model"}; !slices.Equal(got, want) {
		t.Errorf("chain to any project package = %v, want %v", got, want)
	}
	if under("modelx", "model") || !under("model/kernels", "model") || !under("model", "model") {
		t.Error("under: prefix matching is wrong")
	}
}
