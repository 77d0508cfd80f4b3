package env

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/agentrl/agentrl/tool"
)

// SetToolFormat makes the tool wrapper of e (a fresh environment; the wrapper is looked for as
// AttachTools does) speak a model's own tool-call format through its chat template: actions are
// parsed with f (tool.Hermes parses as the wrapper always does), the tools are no longer
// described in the system prompt (the chat template shows their schemas, ToolSchemas), and a
// tool turn's observation is the calls' results as they are, without <tool_response> tags
// ("error: …" for a failed call; several calls' results one per line), for the template to wrap
// as a tool message. f nil restores the wrapper's own behaviour (agentrl's ChatML). It reports
// whether e has a tool wrapper.
func SetToolFormat(e Env, f tool.CallFormat) bool {
	te := findToolEnv(e)
	if te == nil {
		return false
	}
	te.format = f
	return true
}

// ToolSchemas returns tools in OpenAI's function format, {"type": "function", "function":
// {"name", "description", "parameters"}}, the form chat templates take as their tools.
func ToolSchemas(tools []tool.Tool) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(tools))
	for _, t := range tools {
		params := t.Schema()
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage(`{"type": "object", "properties": {}}`)
		}
		if !json.Valid(params) {
			return nil, fmt.Errorf("env: tool %s: its schema is not JSON", t.Name())
		}
		b, err := json.Marshal(struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}{Type: "function", Function: struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}{t.Name(), t.Description(), params}})
		if err != nil {
			return nil, fmt.Errorf("env: tool %s: %w", t.Name(), err)
		}
		out = append(out, b)
	}
	return out, nil
}

// parse returns the call attempts of action in the wrapper's format (nil when it has none).
func (e *toolEnv) parse(action string) []tool.Call {
	lim := tool.ParseLimits{MaxCalls: e.lim.MaxCallsPerTurn, MaxArgBytes: e.lim.MaxArgBytes}
	if e.format == nil || e.format == tool.Hermes {
		return tool.ParseCalls(action, lim)
	}
	if !e.format.HasCall(action) {
		return nil
	}
	if calls := e.format.Parse(action, lim); len(calls) > 0 {
		return calls
	}
	return nil
}
