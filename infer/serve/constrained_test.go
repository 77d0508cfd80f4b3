package serve

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
)

// chatWith posts a chat request with extra fields and decodes the answer.
func chatWith(t *testing.T, url string, req chatRequest, extra map[string]any) (int, []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, req), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		m[k] = v
	}
	return post(t, url+"/v1/chat/completions", "", m)
}

// tool_choice "required" or a named tool forces a call in the model's <tool_call> form, even
// where the model would answer in text; the call's arguments follow the tool's schema. The
// logprobs are those of the masked distribution: where only one token can come (the opening
// tag), its logprob is exactly 0.
func TestForcedToolCall(t *testing.T) {
	_, hs := testServer(t, Options{})
	enumTools := []chatTool{testTools[0]}
	enumTools[0].Function.Parameters = json.RawMessage(`{"type":"object","properties":{"expression":{"enum":["12 + 30"]}},"required":["expression"]}`)
	one := 1.0
	for _, c := range []struct {
		name   string
		turn   int
		tools  []chatTool
		choice any
	}{
		{"required, turn 1", 1, testTools, "required"},
		{"named, turn 1", 1, testTools, map[string]any{"type": "function", "function": map[string]any{"name": "calculator"}}},
		{"required where the model answers in text", 0, enumTools, "required"},
	} {
		for seed := range 3 {
			req := testConversation(max(c.turn, 1))
			if c.turn == 0 { // a greeting the policy was never taught to answer with a call
				req.Messages = []chatMessage{{Role: "user", Content: json.RawMessage(`"héllo wörld"`)}}
			}
			req.Tools = c.tools
			req.Temperature = &one
			s := int64(seed)
			req.Seed = &s
			req.Logprobs = true
			code, body := chatWith(t, hs.URL, req, map[string]any{"tool_choice": c.choice})
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", c.name, code, body)
			}
			resp := mustDecode[chatResponse](t, body)
			ch := resp.Choices[0]
			if *ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "calculator" {
				t.Fatalf("%s, seed %d: %s", c.name, seed, body)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(ch.Message.ToolCalls[0].Function.Arguments), &args); err != nil {
				t.Fatalf("%s: arguments %q: %v", c.name, ch.Message.ToolCalls[0].Function.Arguments, err)
			}
			if _, ok := args["expression"].(string); !ok || len(args) != 1 {
				t.Fatalf("%s: arguments %v do not follow the schema", c.name, args)
			}
			if c.turn == 0 && args["expression"] != "12 + 30" {
				t.Fatalf("%s: arguments %v", c.name, args)
			}
			if lp := ch.Logprobs.Content[0]; lp.Token != "<tool_call>" || lp.Logprob != 0 {
				t.Fatalf("%s: the first token %q has logprob %v, want <tool_call> at 0 (the only token allowed)", c.name, lp.Token, lp.Logprob)
			}
		}
	}
	// Unconstrained, the greeting gets no call: the forcing above made it.
	req := greedy(chatRequest{Messages: []chatMessage{{Role: "user", Content: json.RawMessage(`"héllo wörld"`)}}, Tools: enumTools})
	code, body := post(t, hs.URL+"/v1/chat/completions", "", req)
	if code != 200 || strings.Contains(string(body), "tool_calls") {
		t.Fatalf("the greeting unforced: %d %s", code, body)
	}
	// Streaming a forced call: one tool_calls delta, finish tool_calls.
	req = testConversation(1)
	req.Stream = true
	code, body = chatWith(t, hs.URL, req, map[string]any{"tool_choice": "required"})
	if code != 200 || !strings.Contains(string(body), `"tool_calls":[{"index":0`) || !strings.Contains(string(body), `"finish_reason":"tool_calls"`) {
		t.Fatalf("stream: %d %s", code, body)
	}
}

// response_format json_schema and json_object hold the content to JSON the schema accepts.
func TestStructuredOutput(t *testing.T) {
	_, hs := testServer(t, Options{})
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"ok": map[string]any{"type": "boolean"}, "unit": map[string]any{"enum": []string{"c", "f"}}, "n": map[string]any{"type": "null"}},
		"required": []string{"ok", "unit"}, "additionalProperties": false}
	one := 1.0
	for seed := range 4 {
		req := testConversation(1)
		req.Temperature = &one
		s := int64(seed)
		req.Seed = &s
		req.Logprobs, req.TopLogprobs = true, new(int)
		*req.TopLogprobs = 5
		code, body := chatWith(t, hs.URL, req, map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "r", "schema": schema, "strict": true}}})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		ch := mustDecode[chatResponse](t, body).Choices[0]
		var got struct {
			OK   *bool   `json:"ok"`
			Unit *string `json:"unit"`
			N    any     `json:"n"`
		}
		dec := json.NewDecoder(strings.NewReader(*ch.Message.Content))
		dec.DisallowUnknownFields()
		if *ch.FinishReason != "stop" || dec.Decode(&got) != nil || got.OK == nil || got.Unit == nil || (*got.Unit != "c" && *got.Unit != "f") {
			t.Fatalf("seed %d: %s", seed, body)
		}
		// Top logprobs list only tokens the schema allowed, and their probabilities sum to at most 1.
		for _, lp := range ch.Logprobs.Content {
			sum := 0.0
			for _, c := range lp.TopLogprobs {
				sum += math.Exp(float64(c.Logprob))
			}
			if sum > 1+1e-4 {
				t.Fatalf("top logprobs %v sum to %v", lp.TopLogprobs, sum)
			}
		}
	}
	// json_object: a JSON object, whole when the completion stopped.
	req := testConversation(1)
	req.Temperature = &one
	code, body := chatWith(t, hs.URL, req, map[string]any{"response_format": map[string]any{"type": "json_object"}})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	ch := mustDecode[chatResponse](t, body).Choices[0]
	f, ok := feedText(valueFrame(&schemaNode{types: tObject}, nil), *ch.Message.Content)
	if !ok || !strings.HasPrefix(*ch.Message.Content, "{") {
		t.Fatalf("json_object: %s", body)
	}
	if _, done := step(f, end); *ch.FinishReason == "stop" && (!done || !json.Valid([]byte(*ch.Message.Content))) {
		t.Fatalf("json_object stopped on %q", *ch.Message.Content)
	}
	// Refused: unsupported keywords by name, a format with a forced call, ignore_eos.
	for _, c := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"type": "string", "pattern": "a+"}}}}, `\"pattern\"`},
		{map[string]any{"response_format": map[string]any{"type": "json_object"}, "tool_choice": "required"}, "together"},
		{map[string]any{"response_format": map[string]any{"type": "xml"}}, "json_schema"},
		{map[string]any{"tool_choice": "required", "ignore_eos": true}, "ignore_eos"},
	} {
		code, body := chatWith(t, hs.URL, testConversation(1), c.extra)
		if code != 400 || !strings.Contains(string(body), c.want) {
			t.Errorf("%v: %d %s", c.extra, code, body)
		}
	}
	// A tool whose parameters use an unsupported keyword is refused only when a call is forced.
	tools := []chatTool{testTools[0]}
	tools[0].Function.Parameters = json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","maxLength":9}}}`)
	req = testConversation(1)
	req.Tools = tools
	if code, body := post(t, hs.URL+"/v1/chat/completions", "", req); code != 200 {
		t.Fatalf("auto: %d %s", code, body)
	}
	code, body = chatWith(t, hs.URL, req, map[string]any{"tool_choice": "required"})
	if code != 400 || !strings.Contains(string(body), "maxLength") {
		t.Fatalf("forced with maxLength: %d %s", code, body)
	}
}
