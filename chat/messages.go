package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ParseMessages reads a conversation in OpenAI's chat format: either a JSON array of messages
// or an object {"messages": [...], "tools": [...]}. A message has role and content (a string or
// null) and, where used, tool_calls ({"id", "type": "function", "function": {"name",
// "arguments"}} with arguments a JSON object or a string holding one), tool_call_id, name and
// reasoning_content. Unknown fields are errors.
func ParseMessages(data []byte) ([]Message, []json.RawMessage, error) {
	data = bytes.TrimSpace(data)
	var file struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &file.Messages); err != nil {
			return nil, nil, fmt.Errorf("chat: messages: %w", err)
		}
	} else if err := strictUnmarshal(data, &file); err != nil {
		return nil, nil, fmt.Errorf("chat: conversation: %w", err)
	}
	msgs := make([]Message, len(file.Messages))
	for i, raw := range file.Messages {
		m, err := parseMessage(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("chat: message %d: %w", i, err)
		}
		msgs[i] = m
	}
	for i, t := range file.Tools {
		if _, err := ParseJSON(t); err != nil {
			return nil, nil, fmt.Errorf("chat: tool %d: %w", i, err)
		}
	}
	return msgs, file.Tools, nil
}

// ParseTools reads a JSON array of tool schemas, keeping each as written.
func ParseTools(data []byte) ([]json.RawMessage, error) {
	var tools []json.RawMessage
	if err := json.Unmarshal(data, &tools); err != nil {
		return nil, fmt.Errorf("chat: tools must be a JSON array of objects: %w", err)
	}
	for i, t := range tools {
		v, err := ParseJSON(t)
		if err != nil {
			return nil, fmt.Errorf("chat: tool %d: %w", i, err)
		}
		if _, ok := v.(*Map); !ok {
			return nil, fmt.Errorf("chat: tool %d is not a JSON object", i)
		}
	}
	return tools, nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func parseMessage(raw json.RawMessage) (Message, error) {
	var m struct {
		Role             string  `json:"role"`
		Content          *string `json:"content"`
		ReasoningContent string  `json:"reasoning_content"`
		ToolCalls        []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
		Name       string `json:"name"`
	}
	if err := strictUnmarshal(raw, &m); err != nil {
		return Message{}, err
	}
	if m.Role == "" {
		return Message{}, errors.New("no role")
	}
	out := Message{Role: m.Role, ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID, Name: m.Name}
	if m.Content != nil {
		out.Content = *m.Content
	}
	for j, tc := range m.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return Message{}, fmt.Errorf("tool call %d: only function calls are supported, got %q", j, tc.Type)
		}
		if tc.Function.Name == "" {
			return Message{}, fmt.Errorf("tool call %d: no function name", j)
		}
		args := bytes.TrimSpace(tc.Function.Arguments)
		var s string
		if json.Unmarshal(args, &s) == nil {
			args = []byte(s)
		}
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		v, err := ParseJSON(args)
		if err != nil {
			return Message{}, fmt.Errorf("tool call %d: arguments: %w", j, err)
		}
		if _, ok := v.(*Map); !ok {
			return Message{}, fmt.Errorf("tool call %d: arguments must be a JSON object", j)
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(args)})
	}
	return out, nil
}
