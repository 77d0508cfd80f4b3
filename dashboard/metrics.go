package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
)

// warning is one of the monitor's warnings, or one of its actions, at the training line that
// carried it; its text starts with the invariant it concerns ("exploration", "learning signal",
// "distribution shift").
type warning struct {
	X     int    `json:"x"`
	Phase string `json:"phase"`
	Step  int    `json:"step"`
	Text  string `json:"text"`
}

// evalPoint is one held-out evaluation line, placed after the training line before it: X is
// that line (0 before any), Phase and Step its phase and step ("" and 0 before any).
type evalPoint struct {
	X       int                `json:"x"`
	Phase   string             `json:"phase"`
	Step    int                `json:"step"`
	When    string             `json:"when"`
	Env     string             `json:"env"`
	Metrics map[string]float64 `json:"metrics"`
}

// phaseSpan is the training lines [Start, End] (x, 1-based) of one phase.
type phaseSpan struct {
	Name  string `json:"name"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

// curves holds a run's metrics.jsonl as columns: one value per training line (NaN where the line
// lacks the key), x being the line's 1-based index over the whole run. It is read incrementally:
// refresh reads only what was appended since the last call.
type curves struct {
	path string

	mu       sync.Mutex
	offset   int64 // bytes of complete lines consumed
	n        int   // training lines
	cols     map[string][]float64
	steps    []int // the step number of each training line (within its phase)
	phases   []phaseSpan
	warnings []warning
	actions  []warning // what the monitor did (the lines' "actions")
	evals    []evalPoint
	latest   map[string]float64 // the last training line's numeric fields
	lastRL   map[string]float64 // the last RL line's numeric fields
	bad      int                // lines that did not parse
}

func newCurves(path string) *curves {
	c := &curves{path: path}
	c.reset()
	return c
}

func (c *curves) reset() {
	c.offset, c.n, c.bad = 0, 0, 0
	c.cols = map[string][]float64{}
	c.steps, c.phases, c.warnings, c.actions, c.evals = nil, nil, nil, nil, nil
	c.latest, c.lastRL = nil, nil
}

// refresh reads the lines appended since the last call. A file shorter than what was read (a
// resumed run cuts its metrics back) is read again from the start.
func (c *curves) refresh() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Open(c.path)
	if os.IsNotExist(err) {
		c.reset()
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < c.offset {
		c.reset()
	}
	if st.Size() == c.offset {
		return nil
	}
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(f, st.Size()-c.offset))
	if err != nil {
		return err
	}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return nil // a line being written
	}
	for line := range bytes.SplitSeq(data[:end], []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) > 0 {
			c.add(line)
		}
	}
	c.offset += int64(end + 1)
	return nil
}

// add takes one metrics line.
func (c *curves) add(line []byte) {
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		c.bad++
		return
	}
	nums := map[string]float64{}
	for k, v := range m {
		switch v := v.(type) {
		case float64:
			nums[k] = v
		case bool:
			nums[k] = 0
			if v {
				nums[k] = 1
			}
		}
	}
	if when, ok := m["eval"].(string); ok {
		env, _ := m["env"].(string)
		delete(nums, "version")
		delete(nums, "time/elapsed_s")
		ep := evalPoint{X: c.n, When: when, Env: env, Metrics: nums}
		if c.n > 0 {
			ep.Phase, ep.Step = c.phases[len(c.phases)-1].Name, c.steps[c.n-1]
		}
		c.evals = append(c.evals, ep)
		return
	}
	phase, _ := m["phase"].(string)
	if phase == "" {
		c.bad++
		return
	}
	c.n++
	x := c.n
	step := int(nums["step"])
	c.steps = append(c.steps, step)
	if len(c.phases) == 0 || c.phases[len(c.phases)-1].Name != phase {
		c.phases = append(c.phases, phaseSpan{Name: phase, Start: x, End: x})
	} else {
		c.phases[len(c.phases)-1].End = x
	}
	for k, v := range nums {
		col := c.cols[k]
		for len(col) < x-1 {
			col = append(col, math.NaN())
		}
		c.cols[k] = append(col, v)
	}
	for key, list := range map[string]*[]warning{"warnings": &c.warnings, "actions": &c.actions} {
		if ws, ok := m[key].([]any); ok {
			for _, w := range ws {
				if s, ok := w.(string); ok {
					*list = append(*list, warning{X: x, Phase: phase, Step: step, Text: s})
				}
			}
		}
	}
	c.latest = nums
	if _, ok := nums["reward/mean"]; ok {
		c.lastRL = nums
	}
}

// column returns key's values padded to the run's length (c.mu held).
func (c *curves) column(key string) []float64 {
	col := c.cols[key]
	for len(col) < c.n {
		col = append(col, math.NaN())
	}
	c.cols[key] = col
	return col
}

// keys lists the numeric keys of the training lines, sorted.
func (c *curves) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.cols))
	for k := range c.cols {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// seriesReply is a set of curves over one x axis, ready for uPlot. Null stands for a missing
// value (JSON has no NaN). X is the training line over the whole run, or, for one phase, the step
// within that phase, so that each phase has its own axis and runs line up by phase and step.
type seriesReply struct {
	X      []int                 `json:"x"`
	Series map[string][]*float64 `json:"series"`
	Total  int                   `json:"total"`           // training lines (of the phase) before downsampling
	Phase  string                `json:"phase,omitempty"` // the phase the x axis counts the steps of
}

// hasPhase says whether the run logged a line of the phase.
func (c *curves) hasPhase(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.phases {
		if p.Name == name {
			return true
		}
	}
	return false
}

// phaseNames lists the run's phases in the order they began.
func (c *curves) phaseNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.phases {
		if !slices.Contains(out, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}

// series returns keys (a prefix ending in "/" stands for every key under it) downsampled to at
// most about maxPoints x values: over every training line when phase is "", else over the lines
// of that phase with their step as x (a line whose step does not follow the one before, which a
// well-formed run never writes, is left out so x keeps rising). A phase the run lacks gives no
// points.
func (c *curves) series(keys []string, maxPoints int, phase string) seriesReply {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	seen := map[string]bool{}
	for _, k := range keys {
		if strings.HasSuffix(k, "/") || strings.HasSuffix(k, "*") {
			p := strings.TrimSuffix(k, "*")
			var under []string
			for name := range c.cols {
				if strings.HasPrefix(name, p) && !seen[name] {
					under = append(under, name)
				}
			}
			sort.Strings(under)
			for _, name := range under {
				seen[name] = true
				names = append(names, name)
			}
			continue
		}
		if _, ok := c.cols[k]; ok && !seen[k] {
			seen[k] = true
			names = append(names, k)
		}
	}
	// rows are the 0-based training lines drawn; xs their x values.
	var rows, xs []int
	if phase == "" {
		rows, xs = make([]int, c.n), make([]int, c.n)
		for i := range rows {
			rows[i], xs[i] = i, i+1
		}
	} else {
		for _, p := range c.phases {
			if p.Name != phase {
				continue
			}
			for i := p.Start - 1; i < p.End; i++ {
				if len(xs) == 0 || c.steps[i] > xs[len(xs)-1] {
					rows, xs = append(rows, i), append(xs, c.steps[i])
				}
			}
		}
	}
	cols := make([][]float64, len(names))
	for i, k := range names {
		col := c.column(k)
		cols[i] = make([]float64, len(rows))
		for j, r := range rows {
			cols[i][j] = col[r]
		}
	}
	idx := downsample(cols, len(rows), maxPoints)
	r := seriesReply{X: make([]int, len(idx)), Series: map[string][]*float64{}, Total: len(rows), Phase: phase}
	for i, j := range idx {
		r.X[i] = xs[j]
	}
	for ci, k := range names {
		out := make([]*float64, len(idx))
		for i, j := range idx {
			if v := cols[ci][j]; !math.IsNaN(v) && !math.IsInf(v, 0) {
				out[i] = &v
			}
		}
		r.Series[k] = out
	}
	return r
}

// downsample picks the indices of n rows to keep so that about maxPoints remain: all of them when
// there are few, else per bucket the first row and the rows of each column's minimum and maximum
// (so spikes and warnings' causes stay visible), in order.
func downsample(cols [][]float64, n, maxPoints int) []int {
	if maxPoints < 16 {
		maxPoints = 16
	}
	if n <= maxPoints {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	per := 1 + 2*len(cols)
	buckets := max(1, maxPoints/per)
	var idx []int
	for b := range buckets {
		lo, hi := b*n/buckets, (b+1)*n/buckets
		if lo >= hi {
			continue
		}
		pick := map[int]bool{lo: true, hi - 1: true}
		for _, col := range cols {
			mi, ma := -1, -1
			for j := lo; j < hi; j++ {
				v := col[j]
				if math.IsNaN(v) {
					continue
				}
				if mi < 0 || v < col[mi] {
					mi = j
				}
				if ma < 0 || v > col[ma] {
					ma = j
				}
			}
			if mi >= 0 {
				pick[mi], pick[ma] = true, true
			}
		}
		start := len(idx)
		for j := range pick {
			idx = append(idx, j)
		}
		sort.Ints(idx[start:])
	}
	return idx
}

// runInfo is what the run list shows of a run.
type runInfo struct {
	Name     string      `json:"name"`
	Dir      string      `json:"dir"`
	Lines    int         `json:"lines"`
	Phases   []phaseSpan `json:"phases"`
	Step     int         `json:"step"`
	Warnings int         `json:"warnings"`
	Actions  int         `json:"actions"`
	Evals    int         `json:"evals"`
	Bad      int         `json:"bad_lines"`
	// Updated is when the run last wrote its metrics or config (Unix milliseconds; 0: neither
	// exists yet): the page opens the latest run.
	Updated int64 `json:"updated"`
}

func (c *curves) info(name, dir string) runInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ri := runInfo{Name: name, Dir: dir, Lines: c.n, Phases: append([]phaseSpan{}, c.phases...), Warnings: len(c.warnings), Actions: len(c.actions), Evals: len(c.evals), Bad: c.bad}
	if c.n > 0 {
		ri.Step = c.steps[c.n-1]
	}
	return ri
}

// events returns the run's warnings, the monitor's actions, the evaluations and the phases.
func (c *curves) events() (ws, acts []warning, evs []evalPoint, ph []phaseSpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]warning{}, c.warnings...), append([]warning{}, c.actions...), append([]evalPoint{}, c.evals...), append([]phaseSpan{}, c.phases...)
}

func (c *curves) String() string { return fmt.Sprintf("curves(%s, %d lines)", c.path, c.n) }
