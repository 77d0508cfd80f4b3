package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/agentrl/agentrl/pipeline"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// TrajCmd reads the trajectories a run recorded (runs/<name>/trajectories.atrs).
type TrajCmd struct {
	List   TrajListCmd   `cmd:"" help:"One line per trajectory: phase, step, env, seed, status, reward, turns, tokens."`
	Show   TrajShowCmd   `cmd:"" help:"Replay trajectories as text, turn by turn, with tool calls, rewards and status."`
	Export TrajExportCmd `cmd:"" help:"Write trajectories as JSON lines (the traj JSONL codec) to standard output."`
	Repair TrajRepairCmd `cmd:"" help:"Rewrite a damaged trajectory file with only its intact records (the original is kept as <file>.damaged)."`
}

// trajSource is the PATH argument and the filters every traj command shares.
type trajSource struct {
	Path   string `arg:"" help:"A run directory or a trajectories .atrs file."`
	Phase  string `help:"Only trajectories of this phase (its name in the config: sft, rl, ...)."`
	Env    string `help:"Only trajectories of this environment."`
	Status string `help:"Only trajectories with this status (ok, truncated, env_error, timeout)."`
	First  int    `help:"Only the first N trajectories that pass the other filters (0: all)."`
	Last   int    `help:"Only the last N trajectories that pass the other filters (0: all)."`
}

// file is the .atrs file the source names.
func (s *trajSource) file() (string, error) {
	st, err := os.Stat(s.Path)
	if err != nil {
		return "", fmt.Errorf("traj: %w", err)
	}
	if st.IsDir() {
		return filepath.Join(s.Path, "trajectories.atrs"), nil
	}
	return s.Path, nil
}

// entry is one trajectory with its index in the file.
type entry struct {
	index int
	t     *traj.Trajectory
}

// read returns the trajectories that pass the filters, in file order. A file that ends in a torn
// record (a run still writing, or one that was killed) yields every intact record and a note on
// warn; damage before the end is skipped (the reader resynchronizes on the next intact record),
// each stretch reported on warn with a pointer to 'traj repair'.
func (s *trajSource) read(warn io.Writer) ([]entry, error) {
	if s.First < 0 || s.Last < 0 {
		return nil, errors.New("traj: --first and --last must not be negative")
	}
	if s.First > 0 && s.Last > 0 {
		return nil, errors.New("traj: give --first or --last, not both")
	}
	var status traj.Status
	if s.Status != "" {
		st, err := traj.ParseStatus(s.Status)
		if err != nil {
			return nil, err
		}
		status = st
	}
	path, err := s.file()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("traj: %w", err)
	}
	defer f.Close()
	r, err := traj.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("traj: %s: %w", path, err)
	}
	defer r.Close()
	var damaged, skipped int64
	if err := r.Resync(func(d traj.Damage) {
		damaged++
		skipped += d.Bytes
		fmt.Fprintf(warn, "warning: %s: skipped %s\n", path, d)
	}); err != nil {
		return nil, err
	}
	defer func() {
		if damaged > 0 {
			fmt.Fprintf(warn, "warning: %s: skipped %d damaged stretch(es), %d bytes in all; every intact record was read. 'agentrl traj repair %s' rewrites the file without them (keeping the original)\n",
				path, damaged, skipped, s.Path)
		}
	}()
	var out []entry
	var seen trajSeen
	for i := 0; ; i++ {
		t, err := r.Read()
		if err == io.EOF {
			break
		}
		if errors.Is(err, traj.ErrTornTail) {
			fmt.Fprintf(warn, "note: %s ends in a torn record after %d intact ones (a run still writing, or one that was stopped)\n", path, r.Records())
			break
		}
		if err != nil {
			return s.trim(out), fmt.Errorf("traj: %s: %w", path, err)
		}
		seen.add(t)
		if s.Phase != "" && meta(t, "phase") != s.Phase || s.Env != "" && t.Env != s.Env || s.Status != "" && t.Status != status {
			continue
		}
		out = append(out, entry{i, t})
		if s.First > 0 && len(out) == s.First {
			break
		}
	}
	seen.note(warn, s, len(out))
	return s.trim(out), nil
}

func (s *trajSource) trim(es []entry) []entry {
	if s.Last > 0 && len(es) > s.Last {
		return es[len(es)-s.Last:]
	}
	return es
}

// meta returns the value of a trajectory's metadata key, or "".
func meta(t *traj.Trajectory, key string) string {
	for _, kv := range t.Meta {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// TrajListCmd prints one line per trajectory.
type TrajListCmd struct {
	trajSource
}

// Run prints the table.
func (c *TrajListCmd) Run(g *Globals) error {
	es, err := c.read(g.Stderr)
	if err != nil && len(es) == 0 {
		return err
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "index\tphase\tstep\tenv\tseed\tgroup\tstatus\treward\tturns\ttool calls\ttokens\tsampled\tversions")
	for _, e := range es {
		t := e.t
		calls, sampled := 0, 0
		for _, tu := range t.Turns {
			calls += len(tu.ToolCalls)
		}
		lo, hi := traj.NoVersion, traj.NoVersion
		for i, m := range t.LossMask {
			if !m {
				continue
			}
			sampled++
			if v := t.Versions[i]; lo == traj.NoVersion || v < lo {
				lo = v
			}
			if v := t.Versions[i]; v > hi {
				hi = v
			}
		}
		versions := "-"
		if sampled > 0 {
			versions = fmt.Sprint(lo)
			if hi != lo {
				versions += fmt.Sprintf("–%d", hi)
			}
		}
		tokens := fmt.Sprint(len(t.Tokens))
		if n := t.NumSamples(); n > 1 {
			tokens += fmt.Sprintf(" in %d samples", n)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%g\t%d\t%d\t%s\t%d\t%s\n", e.index, orDash(meta(t, "phase")), orDash(meta(t, "step")),
			t.Env, t.TaskSeed, t.GroupID, t.Status, t.Reward, len(t.Turns), calls, tokens, sampled, versions)
	}
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// TrajShowCmd replays trajectories as text.
type TrajShowCmd struct {
	trajSource
	Index     []int  `help:"Show the trajectories with these indexes in the file (as 'traj list' prints them); the filters still apply."`
	Tokenizer string `help:"Directory with the tokenizer.json the run used (default: the run directory's tokenizer/)."`
}

// Run prints each chosen trajectory: a header, then the conversation segment by segment (a
// segment is a run of tokens with one role), each assistant turn followed by its tool calls and
// reward.
func (c *TrajShowCmd) Run(g *Globals) error {
	tok, err := c.tokenizer()
	if err != nil {
		return err
	}
	for _, i := range c.Index {
		if i < 0 {
			return fmt.Errorf("traj: index %d is negative", i)
		}
	}
	es, rerr := c.read(g.Stderr)
	if len(c.Index) > 0 {
		want := make(map[int]bool, len(c.Index))
		for _, i := range c.Index {
			want[i] = true
		}
		kept := es[:0]
		for _, e := range es {
			if want[e.index] {
				kept = append(kept, e)
				delete(want, e.index)
			}
		}
		es = kept
		if rerr == nil && len(want) > 0 {
			missing := make([]int, 0, len(want))
			for _, i := range c.Index {
				if want[i] {
					missing = append(missing, i)
				}
			}
			rerr = fmt.Errorf("traj: no trajectory with index %v passes the filters", missing)
		}
	}
	w := bufio.NewWriter(g.Stdout)
	for n, e := range es {
		if n > 0 {
			fmt.Fprintln(w)
		}
		writeTrajectory(w, e, tok)
	}
	if err := w.Flush(); rerr == nil {
		rerr = err
	}
	return rerr
}

// tokenizer loads the tokenizer the trajectories were encoded with.
func (c *TrajShowCmd) tokenizer() (*tokenizer.Tokenizer, error) {
	dir := c.Tokenizer
	if dir == "" {
		path, err := c.file()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(filepath.Dir(path), "tokenizer")
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("traj: the tokenizer to decode with (give --tokenizer DIR): %w", err)
	}
	return tok, nil
}

// writeTrajectory prints one trajectory as text.
func writeTrajectory(w io.Writer, e entry, tok *tokenizer.Tokenizer) {
	t := e.t
	fmt.Fprintf(w, "=== trajectory %d  id %s  env %s  seed %d  group %d", e.index, t.ID, t.Env, t.TaskSeed, t.GroupID)
	if p := meta(t, "phase"); p != "" {
		fmt.Fprintf(w, "  phase %s step %s", p, meta(t, "step"))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "status %s  reward %g  turns %d  tokens %d", t.Status, t.Reward, len(t.Turns), len(t.Tokens))
	if n := t.NumSamples(); n > 1 {
		fmt.Fprintf(w, "  samples %d", n)
	}
	if t.Error != "" {
		fmt.Fprintf(w, "  error: %s", t.Error)
	}
	fmt.Fprintln(w)
	why := writeSubEpisodeTree(w, t)
	turnAt := make(map[int]int, len(t.Turns)) // first token of an assistant completion → turn
	for i, tu := range t.Turns {
		turnAt[tu.Start] = i
		for _, c := range tu.ToolCalls {
			if c.Error == "" && strings.HasPrefix(c.Result, "folded ") && tu.ObsEnd == tu.End {
				if _, ok := why[tu.End]; !ok {
					why[tu.End] = "the context folded to the policy's summary (" + c.Result + "), as the policy was given it"
				}
			}
		}
	}
	for start := 0; start < len(t.Tokens); {
		k := t.SampleOf(start)
		_, sampleEnd := t.Sample(k)
		if lo, _ := t.Sample(k); k > 0 && lo == start {
			what, ok := why[start]
			if !ok {
				what = "the context re-rendered by the chat template, as the policy was given it"
			}
			fmt.Fprintf(w, "=== sample %d of %d (tokens %d..%d): %s\n", k+1, t.NumSamples(), start, sampleEnd, what)
		}
		end := start + 1
		for end < sampleEnd && t.Roles[end] == t.Roles[start] {
			end++
		}
		role := t.Roles[start]
		if ti, ok := turnAt[start]; ok && role == traj.RoleAssistant {
			// A turn's completion ends where the turn says, even if an observation of the same
			// role were to follow.
			tu := t.Turns[ti]
			end = min(end, tu.End)
			fmt.Fprintf(w, "--- assistant, turn %d (%d tokens, logprob %.2f)\n", ti+1, tu.End-tu.Start, sum(t.Logprobs[tu.Start:tu.End]))
			fmt.Fprintln(w, tok.Decode(t.Tokens[start:end]))
			for _, call := range tu.ToolCalls {
				fmt.Fprintf(w, "    tool call %s(%s)", call.Name, call.Arguments)
				switch {
				case call.Error != "":
					fmt.Fprintf(w, " -> error: %s\n", call.Error)
				default:
					fmt.Fprintf(w, " -> %s\n", oneLine(call.Result, 200))
				}
			}
			if tu.Reward != 0 {
				fmt.Fprintf(w, "    turn reward %g\n", tu.Reward)
			}
		} else {
			fmt.Fprintf(w, "--- %s (%d tokens)\n", role, end-start)
			fmt.Fprintln(w, tok.Decode(t.Tokens[start:end]))
		}
		start = end
	}
	fmt.Fprintf(w, "=== end of trajectory %d: %s, reward %g\n", e.index, t.Status, t.Reward)
}

func sum(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}

// oneLine shortens s to at most n bytes on one line.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", `\n`)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// TrajExportCmd writes trajectories as JSON lines.
type TrajExportCmd struct {
	trajSource
}

// Run writes one JSON object per line.
func (c *TrajExportCmd) Run(g *Globals) error {
	es, rerr := c.read(g.Stderr)
	w := bufio.NewWriter(g.Stdout)
	var line []byte
	for _, e := range es {
		var err error
		if line, err = e.t.AppendJSON(line[:0]); err != nil {
			return fmt.Errorf("traj: trajectory %d: %w", e.index, err)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	if err := w.Flush(); rerr == nil {
		rerr = err
	}
	return rerr
}

// TrajRepairCmd rewrites a damaged trajectory file with only its intact records.
type TrajRepairCmd struct {
	Path string `arg:"" help:"A run directory or a trajectories .atrs file."`
}

// Run repairs the file and prints what it dropped. A run directory is locked while it is
// repaired, so a training writing to it is never cut under.
func (c *TrajRepairCmd) Run(g *Globals) error {
	src := trajSource{Path: c.Path}
	path, err := src.file()
	if err != nil {
		return err
	}
	if st, err := os.Stat(c.Path); err == nil && st.IsDir() {
		unlock, err := pipeline.LockRun(c.Path)
		if err != nil {
			return fmt.Errorf("traj repair: %w", err)
		}
		defer unlock()
	}
	rep, err := traj.Repair(path, "")
	if err != nil {
		return err
	}
	if rep.Unchanged {
		fmt.Fprintf(g.Stdout, "%s: %d intact records, no damage: left as it was\n", path, rep.Records)
		return nil
	}
	for _, d := range rep.Damage {
		fmt.Fprintf(g.Stdout, "dropped %s\n", d)
	}
	if rep.Torn > 0 {
		fmt.Fprintf(g.Stdout, "dropped a torn final record of %d bytes\n", rep.Torn)
	}
	fmt.Fprintf(g.Stdout, "%s: kept %d intact records, dropped %d bytes; the original is at %s\n", path, rep.Records, rep.Dropped(), rep.Backup)
	return nil
}

// writeSubEpisodeTree prints the tree of t's sub-episodes (rollout.SubEpisodes), indented by
// depth under the episode, and returns what each sub-episode's first sample is, by its first
// token.
func writeSubEpisodeTree(w io.Writer, t *traj.Trajectory) map[int]string {
	why := map[int]string{}
	subs := rollout.SubEpisodes(t)
	if len(subs) == 0 {
		return why
	}
	calls, critical := meta(t, rollout.MetaModelCalls), meta(t, rollout.MetaCriticalCalls)
	fmt.Fprintf(w, "sub-episodes %d  model calls %s  critical path %s\n", len(subs), calls, critical)
	fmt.Fprintf(w, "%s\n", t.ID)
	for _, s := range subs {
		fmt.Fprintf(w, "%s└ %s  depth %d  from turn %d of %s  %s  reward %g  calls %d  critical %d", strings.Repeat("  ", s.Depth), s.ID, s.Depth, s.Turn+1, s.Parent, s.Status, s.Reward, s.Calls, s.Critical)
		if s.End > s.Start {
			fmt.Fprintf(w, "  tokens %d..%d\n", s.Start, s.End)
			why[s.Start] = fmt.Sprintf("sub-episode %s (depth %d, delegated by %s at its turn %d)", s.ID, s.Depth, s.Parent, s.Turn+1)
		} else {
			fmt.Fprintf(w, "  not trained\n")
		}
	}
	return why
}
