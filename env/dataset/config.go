// Package dataset makes an environment of a file of tasks with reference answers (JSONL, CSV
// or Parquet): each row a task whose prompt is a field or a template over fields, graded by one
// of reward's verifiers against its answer field, split into train and held-out rows by a
// fraction or by a field, with difficulty levels from a field. Files are read streaming with
// their size, line length and row count bounded; a malformed row is skipped and counted, or
// refused with its line number when Strict. Episodes are single-turn (the prompt, then the
// answer, graded), or multi-turn with built-in tools before the answer. Files of
// demonstrations in OpenAI's chat format are read here too (ReadDemos), checked against the
// agent loop's episodes.
package dataset

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Bounds of a dataset.
const (
	DefaultMaxBytes     = 1 << 30 // the whole file
	DefaultMaxLineBytes = 1 << 20 // one JSONL line or CSV record
	DefaultMaxRows      = 1_000_000
	MaxRowsLimit        = 10_000_000
)

// Tools lists the built-in tools a dataset's episodes may be given.
var Tools = []string{"calculator"}

// Verifiers lists the graders a dataset may name.
var Verifiers = []string{"exact", "numeric", "rational", "set", "regex", "json-schema", "test-cases", "judge"}

// Config is an environment entry's `tasks:` block.
type Config struct {
	// Path is the file: .jsonl (or .ndjson), .csv or .parquet, read by its extension.
	Path string `yaml:"path"`
	// Prompt is a field name, or a template over fields: "Q: {question}\nA:" ({{ and }} are
	// literal braces).
	Prompt string `yaml:"prompt"`
	// Answer is the field of the reference answer.
	Answer string `yaml:"answer"`
	// ID is the field of a row's id (absent: its line number); a repeated id is a malformed row.
	ID string `yaml:"id,omitempty"`
	// System is the system prompt of every episode.
	System string `yaml:"system,omitempty"`
	// Split says which rows are held out.
	Split Split `yaml:"split"`
	// Verifier grades the final turn against the answer: exact (normalised text), numeric
	// (within a tolerance), rational (exactly equal numbers), set (comma-separated items in any
	// order), regex (the answer field is a pattern the whole final turn must match),
	// json-schema (the answer field is a JSON Schema the final turn's JSON must satisfy),
	// test-cases (the answer field is {"inputs": [...], "outputs": [...]}: the final turn's
	// ```python program, run in the bubblewrap sandbox with time and memory limits, must print
	// each output from its input), judge (a model behind an OpenAI-compatible endpoint grades
	// by a rubric: Judge).
	Verifier string `yaml:"verifier"`
	// Judge is the judge verifier's server and rubric (only with verifier judge).
	Judge *JudgeConfig `yaml:"judge,omitempty"`
	// Tolerance is numeric's relative tolerance (1e-6).
	Tolerance float64 `yaml:"tolerance,omitempty"`
	// Level is the field of a row's difficulty level, an integer in [1, env.MaxLevel].
	Level string `yaml:"level,omitempty"`
	// Demo is the field of the expert's first turn (e.g. a tool call); the expert then answers
	// the reference answer. Without it the expert answers at once.
	Demo string `yaml:"demo,omitempty"`
	// Tools are built-in tools the episodes may call before answering (available: calculator),
	// which makes them multi-turn: each turn with a tool call is answered by the tool, and the
	// first turn without one is graded.
	Tools []string `yaml:"tools,omitempty"`
	// ToolsFrom names a remote environment of the run (an entry with a remote block) whose tools,
	// as its servers' metadata lists them, the episodes may call before answering: each episode
	// opens a session there (reset with the episode's seed), each turn with a tool call goes to
	// its step and the tool observation answers it, and the first turn without one is graded
	// here (never sent there; the server's rewards are ignored). A failed call, a session that
	// ends before the answer or a tool not in the metadata makes the episode env_error. Not with
	// tools.
	ToolsFrom string `yaml:"tools_from,omitempty"`
	// MaxTurns bounds an episode with tools (4).
	MaxTurns int `yaml:"max_turns,omitempty"`
	// Strict refuses the file at its first malformed row, naming its line, instead of skipping
	// and counting it.
	Strict bool `yaml:"strict,omitempty"`
	// MaxBytes, MaxLineBytes and MaxRows bound the file, one line or record, and the rows kept.
	MaxBytes     int64 `yaml:"max_bytes,omitempty"`
	MaxLineBytes int   `yaml:"max_line_bytes,omitempty"`
	MaxRows      int   `yaml:"max_rows,omitempty"`
}

// Split says which rows are held out: HeldOut is a fraction in (0, 1) of rows chosen by a hash of
// their id, or the name of a field whose value says the row's split ("train", or one of
// "test", "heldout", "held_out", "validation", "valid", "eval").
type Split struct {
	HeldOut any `yaml:"held_out"`
}

// Format is the file's format from its extension.
func (c Config) Format() string {
	switch strings.ToLower(filepath.Ext(c.Path)) {
	case ".jsonl", ".ndjson":
		return "jsonl"
	case ".csv":
		return "csv"
	case ".parquet":
		return "parquet"
	}
	return ""
}

// HasExpert reports whether the reference answers are replies an expert can demonstrate: not
// for regex, json-schema and test-cases, whose answers are patterns, schemas and tests.
func (c Config) HasExpert() bool {
	switch c.Verifier {
	case "regex", "json-schema", "test-cases":
		return false
	}
	return true
}

// fraction and field read Split.HeldOut.
func (s Split) fraction() (float64, bool) {
	switch v := s.HeldOut.(type) {
	case float64:
		return v, true
	case uint64:
		return float64(v), true
	case int64:
		return float64(v), true
	case int:
		return float64(v), true
	}
	return 0, false
}

func (s Split) field() (string, bool) {
	v, ok := s.HeldOut.(string)
	return v, ok
}

var (
	fieldRE = regexp.MustCompile(`^[^{}]{1,256}$`)
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// HasTools reports whether the episodes have tools: built-in ones or a remote environment's.
func (c Config) HasTools() bool { return len(c.Tools) > 0 || c.ToolsFrom != "" }

// Validate reports every problem of the block, each naming its setting.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("tasks."+format, a...)) }
	if c.Path == "" {
		bad("path: name the file of tasks (.jsonl, .csv or .parquet)")
	} else if c.Format() == "" {
		bad("path %q: the extension must be .jsonl, .ndjson, .csv or .parquet", c.Path)
	}
	if c.Prompt == "" {
		bad("prompt: a field name or a template over fields, e.g. \"{question}\"")
	} else if _, err := parseTemplate(c.Prompt); err != nil {
		bad("prompt: %v", err)
	}
	if !fieldRE.MatchString(c.Answer) {
		bad("answer: the field of the reference answer")
	}
	switch {
	case c.ToolsFrom != "" && len(c.Tools) > 0:
		bad("tools_from: give built-in tools or a remote environment's (tools_from), not both")
	case c.ToolsFrom != "" && !nameRE.MatchString(c.ToolsFrom):
		bad("tools_from %q: the name of a remote environment of the run (1-64 letters, digits, '.', '_' or '-')", c.ToolsFrom)
	}
	if c.Demo != "" && !c.HasTools() {
		bad("demo: a first turn before the answer needs tools (a single-turn episode ends at its first turn)")
	}
	for name, f := range map[string]string{"id": c.ID, "level": c.Level, "demo": c.Demo} {
		if f != "" && !fieldRE.MatchString(f) {
			bad("%s %q is not a field name", name, f)
		}
	}
	if fr, ok := c.Split.fraction(); ok {
		if !(fr > 0 && fr < 1) || math.IsNaN(fr) {
			bad("split.held_out %v: a fraction in (0, 1), or a field name", fr)
		}
	} else if f, ok := c.Split.field(); ok {
		if !fieldRE.MatchString(f) {
			bad("split.held_out %q is not a field name", f)
		}
	} else {
		bad("split.held_out: a fraction in (0, 1) of rows, or the field saying each row's split")
	}
	known := false
	for _, v := range Verifiers {
		known = known || v == c.Verifier
	}
	if !known {
		bad("verifier %q: one of %s", c.Verifier, strings.Join(Verifiers, ", "))
	}
	switch {
	case c.Verifier == "judge" && c.Judge == nil:
		bad("judge: verifier judge needs the judge block (url, model, rubric, …)")
	case c.Verifier == "judge":
		if err := c.Judge.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tasks.%w", err))
		}
	case c.Judge != nil:
		bad("judge does nothing unless verifier is judge")
	}
	if c.Demo != "" && !c.HasExpert() {
		bad("demo: a %s-graded dataset has no expert (its answers are not replies)", c.Verifier)
	}
	if c.Tolerance != 0 && (c.Verifier != "numeric" || !(c.Tolerance > 0 && c.Tolerance < 1)) {
		bad("tolerance %v: numeric's relative tolerance, in (0, 1)", c.Tolerance)
	}
	seen := map[string]bool{}
	for _, t := range c.Tools {
		if !slices.Contains(Tools, t) || seen[t] {
			bad("tools: %q is unknown or listed twice (available: %s)", t, strings.Join(Tools, ", "))
		}
		seen[t] = true
	}
	if c.MaxTurns != 0 && (!c.HasTools() || c.MaxTurns < 2 || c.MaxTurns > 64) {
		bad("max_turns %d: with tools, in [2, 64] (default 4); without tools an episode is one turn", c.MaxTurns)
	}
	if c.MaxBytes < 0 || c.MaxLineBytes < 0 || c.MaxRows < 0 || c.MaxRows > MaxRowsLimit {
		bad("max_bytes, max_line_bytes and max_rows must not be negative, max_rows at most %d", MaxRowsLimit)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = DefaultMaxLineBytes
	}
	if c.MaxRows == 0 {
		c.MaxRows = DefaultMaxRows
	}
	if c.Tolerance == 0 {
		c.Tolerance = 1e-6
	}
	if c.MaxTurns == 0 {
		c.MaxTurns = 4
	}
	return c
}

// template is a prompt: literal text and fields, alternating.
type template struct {
	parts  []string // literal, field, literal, field, …, literal
	single bool     // the prompt is one field's name
}

func parseTemplate(s string) (template, error) {
	if !strings.ContainsAny(s, "{}") {
		return template{parts: []string{"", s, ""}, single: true}, nil
	}
	var t template
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "{{"):
			lit.WriteByte('{')
			i++
		case strings.HasPrefix(s[i:], "}}"):
			lit.WriteByte('}')
			i++
		case s[i] == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 2 {
				return t, fmt.Errorf("template %q: an unclosed or empty {field} at byte %d", s, i)
			}
			t.parts = append(t.parts, lit.String(), s[i+1:i+j])
			lit.Reset()
			i += j
		case s[i] == '}':
			return t, fmt.Errorf("template %q: a lone } at byte %d (write }} for a brace)", s, i)
		default:
			lit.WriteByte(s[i])
		}
	}
	t.parts = append(t.parts, lit.String())
	if len(t.parts) == 1 {
		return t, fmt.Errorf("template %q names no {field}", s)
	}
	return t, nil
}

func (t template) render(row func(string) (string, error)) (string, error) {
	var b strings.Builder
	for i, p := range t.parts {
		if i%2 == 0 {
			b.WriteString(p)
			continue
		}
		v, err := row(p)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	return b.String(), nil
}
