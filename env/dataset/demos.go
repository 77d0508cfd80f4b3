package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentrl/agentrl/chat"
)

// Bounds of a file of demonstrations.
const (
	DefaultDemoMaxBytes     = 1 << 30 // the whole file
	DefaultDemoMaxLineBytes = 8 << 20 // one conversation
	DefaultDemoMaxRows      = 1_000_000
)

// DemoConfig says how to read a file of demonstrations: JSONL, one conversation a line in
// OpenAI's chat format, {"messages": [...], "tools": [...]} (tools optional).
type DemoConfig struct {
	Path string
	// Strict refuses the file at its first bad row, naming its line; otherwise bad rows are
	// dropped and counted by reason.
	Strict bool
	// MaxBytes, MaxLineBytes and MaxRows bound the file, one line and the rows kept (0: the
	// defaults).
	MaxBytes     int64
	MaxLineBytes int
	MaxRows      int
}

// Demo is one demonstration in the agent loop's shape: an optional system message, the user's
// opening message, then assistant turns, each but the last answered by one observation.
type Demo struct {
	Line     int               // the row's line, from 1
	Messages []chat.Message    // the conversation as written
	Tools    []json.RawMessage // the row's tools (nil: none given)
	System   string
	User     string
	Turns    []DemoTurn
}

// DemoTurn is one assistant message and what answers it.
type DemoTurn struct {
	Assistant chat.Message
	// ObsRole is "tool" (the assistant called tools: Results are their answers in the calls'
	// order) or "user" (Results holds the user's next message); "" after the last turn.
	ObsRole string
	Results []string
}

// Demos is a file of demonstrations read: the rows kept and what was dropped.
type Demos struct {
	Rows []Demo
	// Skipped counts the dropped rows by reason (bad_json, invalid_utf8, line_too_long,
	// unknown_role, misplaced_system, no_user, unanswered_tool_call, unexpected_tool,
	// unknown_tool, empty_turn, no_final_assistant, and those the renderer adds).
	Skipped map[string]int
	// Examples holds the first few dropped rows, "line N: reason: detail".
	Examples []string
}

// Skip counts a dropped row.
func (d *Demos) Skip(line int, reason, detail string) {
	if d.Skipped == nil {
		d.Skipped = map[string]int{}
	}
	d.Skipped[reason]++
	if len(d.Examples) < 5 {
		if len(detail) > 200 {
			detail = detail[:200] + "…"
		}
		d.Examples = append(d.Examples, fmt.Sprintf("line %d: %s: %s", line, reason, strings.ToValidUTF8(detail, "?")))
	}
}

// DescribeSkips is the dropped rows in one line ("" when none).
func (d *Demos) DescribeSkips() string {
	if len(d.Skipped) == 0 {
		return ""
	}
	keys := make([]string, 0, len(d.Skipped))
	for k := range d.Skipped {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, d.Skipped[k])
	}
	s := strings.Join(parts, ", ")
	if len(d.Examples) > 0 {
		s += "; first: " + d.Examples[0]
	}
	return s
}

func (c DemoConfig) withDefaults() DemoConfig {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultDemoMaxBytes
	}
	if c.MaxLineBytes <= 0 {
		c.MaxLineBytes = DefaultDemoMaxLineBytes
	}
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultDemoMaxRows
	}
	return c
}

// LoadDemos reads the file of c.
func LoadDemos(c DemoConfig) (*Demos, error) {
	f, err := os.Open(c.Path)
	if err != nil {
		return nil, fmt.Errorf("sft.data: %w", err)
	}
	defer f.Close()
	c = c.withDefaults()
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("sft.data: %w", err)
	} else if st.Mode().IsRegular() && st.Size() > c.MaxBytes {
		return nil, fmt.Errorf("sft.data %s: %w: %d bytes, over %d", c.Path, ErrTooLarge, st.Size(), c.MaxBytes)
	}
	d, err := ReadDemos(f, c)
	if err != nil {
		return nil, fmt.Errorf("sft.data %s: %w", c.Path, err)
	}
	return d, nil
}

// ReadDemos reads demonstrations from r. A bad row is a *RowError when c.Strict, else dropped
// and counted; a file with no row left is an error.
func ReadDemos(r io.Reader, c DemoConfig) (*Demos, error) {
	c = c.withDefaults()
	d := &Demos{Skipped: map[string]int{}}
	bad := func(line int, reason, detail string) error {
		if c.Strict {
			return &RowError{Line: line, Reason: reason, Detail: detail}
		}
		d.Skip(line, reason, detail)
		return nil
	}
	br := bufio.NewReaderSize(&limitReader{r: r, left: c.MaxBytes}, 64<<10)
	for line := 1; ; line++ {
		text, tooLong, err := readLine(br, c.MaxLineBytes)
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		var e error
		switch {
		case tooLong:
			e = bad(line, "line_too_long", fmt.Sprintf("over %d bytes", c.MaxLineBytes))
		case len(bytes.TrimSpace(text)) == 0:
		default:
			demo, reason, derr := ParseDemo(text)
			if derr != nil {
				e = bad(line, reason, derr.Error())
				break
			}
			if len(d.Rows) >= c.MaxRows {
				return nil, fmt.Errorf("%w: more than %d demonstrations", ErrTooLarge, c.MaxRows)
			}
			demo.Line = line
			d.Rows = append(d.Rows, demo)
		}
		if e != nil {
			return nil, e
		}
		if err == io.EOF {
			break
		}
	}
	if len(d.Rows) == 0 {
		if len(d.Skipped) == 0 {
			return nil, fmt.Errorf("no demonstration: the file has no rows")
		}
		return nil, fmt.Errorf("no demonstration: every row was dropped (%s)", d.DescribeSkips())
	}
	return d, nil
}

// ParseDemo reads one row: the conversation and its shape, or the reason it is refused and why.
func ParseDemo(line []byte) (Demo, string, error) {
	if !utf8.Valid(line) {
		return Demo{}, "invalid_utf8", fmt.Errorf("the line is not valid UTF-8")
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return Demo{}, "bad_json", fmt.Errorf(`a row is a JSON object {"messages": [...], "tools": [...]}`)
	}
	msgs, tools, err := chat.ParseMessages(line)
	if err != nil {
		return Demo{}, "bad_json", err
	}
	d := Demo{Messages: msgs, Tools: tools}
	if tools != nil && len(tools) == 0 {
		d.Tools = nil
	}
	reason, err := d.shape()
	if err != nil {
		return Demo{}, reason, err
	}
	return d, "", nil
}

// shape checks the conversation against the agent loop's episodes and fills System, User and
// Turns.
func (d *Demo) shape() (string, error) {
	names := map[string]bool{}
	for i, t := range d.Tools {
		var s struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &s); err != nil || s.Function.Name == "" {
			return "bad_json", fmt.Errorf("tools[%d]: a tool is {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}", i)
		}
		names[s.Function.Name] = true
	}
	msgs := d.Messages
	i := 0
	for j, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return "unknown_role", fmt.Errorf("message %d: role %q (system, user, assistant or tool)", j, m.Role)
		}
		if m.Role == "system" && j > 0 {
			return "misplaced_system", fmt.Errorf("message %d: a system message only opens the conversation", j)
		}
	}
	if i < len(msgs) && msgs[i].Role == "system" {
		d.System = msgs[i].Content
		i++
	}
	if i >= len(msgs) || msgs[i].Role != "user" {
		return "no_user", fmt.Errorf("message %d: the conversation must open with a user message (after an optional system one)", i)
	}
	d.User = msgs[i].Content
	i++
	for i < len(msgs) {
		a := msgs[i]
		if a.Role != "assistant" {
			return "unexpected_" + a.Role, fmt.Errorf("message %d: a %s message where the assistant speaks", i, a.Role)
		}
		if strings.TrimSpace(a.Content) == "" && len(a.ToolCalls) == 0 && a.ReasoningContent == "" {
			return "empty_turn", fmt.Errorf("message %d: an assistant message with no content and no tool call", i)
		}
		for k, c := range a.ToolCalls {
			if d.Tools != nil && !names[c.Name] {
				return "unknown_tool", fmt.Errorf("message %d: tool call %d names %q, not one of the row's tools", i, k, c.Name)
			}
		}
		i++
		t := DemoTurn{Assistant: a}
		if len(a.ToolCalls) > 0 {
			if i >= len(msgs) || msgs[i].Role != "tool" {
				return "unanswered_tool_call", fmt.Errorf("message %d: %d tool call(s) and no tool message answering them", i-1, len(a.ToolCalls))
			}
			t.ObsRole, t.Results = "tool", make([]string, len(a.ToolCalls))
			given := make([]bool, len(a.ToolCalls))
			for k := 0; k < len(a.ToolCalls); k++ {
				if i >= len(msgs) || msgs[i].Role != "tool" {
					return "unanswered_tool_call", fmt.Errorf("message %d: %d tool call(s), answered by %d tool message(s)", i-1-k, len(a.ToolCalls), k)
				}
				at := k
				if id := msgs[i].ToolCallID; id != "" {
					at = -1
					for n, c := range a.ToolCalls {
						if c.ID == id {
							at = n
						}
					}
					if at < 0 {
						return "unexpected_tool", fmt.Errorf("message %d: tool_call_id %q answers no call of the assistant's", i, id)
					}
				}
				if given[at] {
					return "unexpected_tool", fmt.Errorf("message %d: tool call %d is answered twice", i, at)
				}
				given[at], t.Results[at] = true, msgs[i].Content
				i++
			}
			if i < len(msgs) && msgs[i].Role == "tool" {
				return "unexpected_tool", fmt.Errorf("message %d: more tool messages than the %d call(s)", i, len(a.ToolCalls))
			}
			if i < len(msgs) && msgs[i].Role == "user" {
				return "unexpected_user", fmt.Errorf("message %d: a user message right after tool results (the loop gives one observation a turn)", i)
			}
		} else if i < len(msgs) {
			if msgs[i].Role != "user" {
				return "unexpected_" + msgs[i].Role, fmt.Errorf("message %d: a %s message answers an assistant message without tool calls", i, msgs[i].Role)
			}
			t.ObsRole, t.Results = "user", []string{msgs[i].Content}
			i++
		}
		d.Turns = append(d.Turns, t)
	}
	if len(d.Turns) == 0 {
		return "no_final_assistant", fmt.Errorf("no assistant message: nothing to learn")
	}
	if last := d.Turns[len(d.Turns)-1]; last.ObsRole != "" {
		return "no_final_assistant", fmt.Errorf("the conversation ends with a %s message no assistant message answers", last.ObsRole)
	}
	return "", nil
}
