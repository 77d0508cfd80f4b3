package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

var responseTools = []map[string]any{{"type": "function", "name": "calculator", "description": "Evaluate an arithmetic expression.",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"expression": map[string]any{"type": "string"}}, "required": []string{"expression"}}}}

func respond(t *testing.T, url string, body map[string]any) (int, responseObject, []byte) {
	t.Helper()
	code, out := post(t, url+"/v1/responses", "", body)
	var o responseObject
	if code == 200 {
		o = mustDecode[responseObject](t, out)
	}
	return code, o, out
}

// A tool call and its answer over the Responses API, the second turn continuing the first by
// previous_response_id: the same prompts, and so the same completions, as the chat route's.
func TestResponsesToolChain(t *testing.T) {
	srv, hs := testServer(t, Options{})
	code, first, body := respond(t, hs.URL, map[string]any{"model": "agentrl", "instructions": "You are a careful calculator.",
		"input": testQuestion, "tools": responseTools, "temperature": 0, "reasoning": map[string]any{"effort": nil}, "include": []string{}})
	if code != 200 || first.Status != "completed" || len(first.Output) != 1 || first.Output[0].Type != "function_call" ||
		first.Output[0].Name != "calculator" || *first.Output[0].Arguments != `{"expression":"12 + 30"}` || !strings.HasPrefix(first.ID, "resp_") {
		t.Fatalf("first: %d %s", code, body)
	}
	// The prompt is the chat route's.
	chat, err := srv.parseChat(mustJSON(t, testConversation(1)))
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage.InputTokens != len(chat.prompt) {
		t.Fatalf("input tokens %d, the chat prompt has %d", first.Usage.InputTokens, len(chat.prompt))
	}
	code, second, body := respond(t, hs.URL, map[string]any{"instructions": "You are a careful calculator.", "previous_response_id": first.ID,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": first.Output[0].CallID, "output": "42"}},
		"tools": responseTools, "temperature": 0})
	if code != 200 || len(second.Output) != 1 || second.Output[0].Type != "message" || second.Output[0].Content[0].Text != testAnswer ||
		*second.PreviousResponseID != first.ID {
		t.Fatalf("second: %d %s", code, body)
	}
	chat, err = srv.parseChat(mustJSON(t, testConversation(2)))
	if err != nil {
		t.Fatal(err)
	}
	if second.Usage.InputTokens != len(chat.prompt) {
		t.Fatalf("input tokens %d, the chat prompt has %d", second.Usage.InputTokens, len(chat.prompt))
	}
	// The same conversation sent whole as items, without previous_response_id.
	code, whole, body := respond(t, hs.URL, map[string]any{"instructions": "You are a careful calculator.", "store": false, "temperature": 0, "tools": responseTools,
		"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": testQuestion}}},
			map[string]any{"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": `{"expression": "12 + 30"}`},
			map[string]any{"type": "function_call_output", "call_id": "c1", "output": "42"}}})
	if code != 200 || whole.Output[0].Content[0].Text != testAnswer || whole.Usage.InputTokens != len(chat.prompt) || whole.Store {
		t.Fatalf("whole: %d %s", code, body)
	}
	if code, _, body := respond(t, hs.URL, map[string]any{"previous_response_id": whole.ID, "input": "again"}); code != 404 {
		t.Fatalf("a response with store false was kept: %d %s", code, body)
	}
}

// previous_response_id names a response the server keeps: an unknown one, or one evicted (the
// oldest go first), is a 404 that says so.
func TestResponsesStoreBound(t *testing.T) {
	_, hs := testServer(t, Options{ResponseStore: 2})
	var ids []string
	for i := range 3 {
		code, o, body := respond(t, hs.URL, map[string]any{"input": fmt.Sprintf("hello %d", i), "max_output_tokens": 2})
		if code != 200 || o.Status != "incomplete" || o.IncompleteDetails == nil || o.IncompleteDetails.Reason != "max_output_tokens" {
			t.Fatalf("%d %s", code, body)
		}
		ids = append(ids, o.ID)
	}
	for i, id := range append(ids, "resp_nope") {
		code, _, body := respond(t, hs.URL, map[string]any{"input": "more", "previous_response_id": id, "max_output_tokens": 1})
		want := 200
		if i == 0 || i == 3 {
			want = 404
		}
		if code != want || (want == 404 && (!strings.Contains(string(body), "previous_response_not_found") || !strings.Contains(string(body), id))) {
			t.Errorf("previous_response_id %s: %d %s, want %d", id, code, body, want)
		}
	}
	// A chain whose start was evicted says which response is gone.
	_, a, _ := respond(t, hs.URL, map[string]any{"input": "a", "max_output_tokens": 1})
	_, b, _ := respond(t, hs.URL, map[string]any{"input": "b", "max_output_tokens": 1, "previous_response_id": a.ID})
	respond(t, hs.URL, map[string]any{"input": "c", "max_output_tokens": 1})
	code, _, body := respond(t, hs.URL, map[string]any{"input": "d", "max_output_tokens": 1, "previous_response_id": b.ID})
	if code != 404 || !strings.Contains(string(body), a.ID) {
		t.Fatalf("evicted chain start: %d %s", code, body)
	}
}

type responseEvent struct {
	name string
	data map[string]any
}

func responseEvents(t *testing.T, body []byte) []responseEvent {
	t.Helper()
	var out []responseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
		} else if d, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil || m["type"] != name || int(m["sequence_number"].(float64)) != len(out) {
				t.Fatalf("event %s: %s (%v)", name, d, err)
			}
			out = append(out, responseEvent{name, m})
		}
	}
	return out
}

// Streaming: the documented events in order, the final response the same as without streaming.
func TestResponsesStream(t *testing.T) {
	_, hs := testServer(t, Options{})
	for turn, body := range []map[string]any{
		{"instructions": "You are a careful calculator.", "input": testQuestion, "tools": responseTools, "temperature": 0, "stream": true},
		{"input": "the agent", "temperature": 0, "max_output_tokens": 8, "stream": true},
	} {
		code, out := post(t, hs.URL+"/v1/responses", "", body)
		if code != 200 {
			t.Fatalf("%d %s", code, out)
		}
		events := responseEvents(t, out)
		var names []string
		var text strings.Builder
		for _, e := range events {
			names = append(names, e.name)
			if e.name == "response.output_text.delta" {
				text.WriteString(e.data["delta"].(string))
			}
		}
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
		if turn == 1 {
			want = []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
			for range strings.Count(strings.Join(names, " "), "response.output_text.delta") {
				want = append(want, "response.output_text.delta")
			}
			final := events[len(events)-1].data["response"].(map[string]any)
			want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response."+final["status"].(string))
		}
		if !slices.Equal(names, want) {
			t.Fatalf("turn %d events %v, want %v", turn, names, want)
		}
		final := events[len(events)-1].data["response"].(map[string]any)
		delete(body, "stream")
		_, plain, _ := respond(t, hs.URL, body)
		output := final["output"].([]any)
		first := output[0].(map[string]any)
		if turn == 0 && (first["arguments"] != *plain.Output[0].Arguments || first["call_id"] == "") {
			t.Fatalf("streamed %v, answered %+v", first, plain.Output[0])
		}
		if turn == 1 {
			content := first["content"].([]any)[0].(map[string]any)["text"]
			if content != plain.Output[0].Content[0].Text || text.String() != content {
				t.Fatalf("streamed %q (deltas %q), answered %q", content, text.String(), plain.Output[0].Content[0].Text)
			}
		}
	}
}

// Forced calls and structured output over the Responses API, and its refusals.
func TestResponsesConstrainedAndErrors(t *testing.T) {
	_, hs := testServer(t, Options{})
	code, o, body := respond(t, hs.URL, map[string]any{"input": "héllo wörld", "tools": responseTools, "tool_choice": map[string]any{"type": "function", "name": "calculator"}})
	if code != 200 || o.Output[len(o.Output)-1].Type != "function_call" {
		t.Fatalf("named tool: %d %s", code, body)
	}
	code, o, body = respond(t, hs.URL, map[string]any{"input": testQuestion, "text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "r",
		"schema": map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}}}}})
	if code != 200 || !json.Valid([]byte(o.Output[0].Content[0].Text)) || !strings.HasPrefix(o.Output[0].Content[0].Text, `{"ok":`) {
		t.Fatalf("json_schema: %d %s", code, body)
	}
	for _, c := range []struct {
		body map[string]any
		code int
		want string
	}{
		{map[string]any{}, 400, "input"},
		{map[string]any{"input": []any{}}, 400, "input"},
		{map[string]any{"input": []any{map[string]any{"type": "reasoning"}}}, 400, "reasoning"},
		{map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "x"}}}}}, 400, "input_image"},
		{map[string]any{"input": "a", "tools": []any{map[string]any{"type": "web_search"}}}, 400, "web_search"},
		{map[string]any{"input": "a", "background": true}, 400, "background"},
		{map[string]any{"input": "a", "truncation": "auto"}, 400, "truncation"},
		{map[string]any{"input": "a", "max_output_tokens": 100000}, 400, `"param":"max_output_tokens"`},
		{map[string]any{"input": "a", "reasoning": map[string]any{"effort": "high"}}, 400, "reasoning.effort"},
		{map[string]any{"input": "a", "temperature": 1e30}, 400, "temperature"},
		{map[string]any{"input": "a", "model": "gpt-4o"}, 404, "model_not_found"},
		{map[string]any{"input": "a", "text": map[string]any{"format": map[string]any{"type": "json_schema", "schema": map[string]any{"oneOf": []any{}}}}}, 400, "oneOf"},
	} {
		code, _, body := respond(t, hs.URL, c.body)
		if code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%v: %d %s, want %d with %q", c.body, code, body, c.code, c.want)
		}
	}
}
