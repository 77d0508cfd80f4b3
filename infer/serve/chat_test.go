package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/tokenizer"
)

func greedy(req chatRequest) chatRequest {
	zero := 0.0
	req.Temperature = &zero
	return req
}

// A chat with tools: the model's <tool_call> comes back as tool_calls with finish_reason
// tool_calls; the tool's answer rendered back gets the final answer.
func TestChatToolCalls(t *testing.T) {
	_, hs := testServer(t, Options{})
	code, body := post(t, hs.URL+"/v1/chat/completions", "", greedy(testConversation(1)))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	resp := mustDecode[chatResponse](t, body)
	ch := resp.Choices[0]
	if *ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != nil {
		t.Fatalf("want one tool call, got %s", body)
	}
	tc := ch.Message.ToolCalls[0]
	if tc.Type != "function" || tc.Function.Name != "calculator" || tc.Function.Arguments != `{"expression":"12 + 30"}` || tc.ID == "" {
		t.Fatalf("tool call %+v", tc)
	}
	if resp.Object != "chat.completion" || resp.Usage.CompletionTokens == 0 || resp.Usage.PromptTokens == 0 {
		t.Fatalf("response %s", body)
	}

	code, body = post(t, hs.URL+"/v1/chat/completions", "", greedy(testConversation(2)))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	resp = mustDecode[chatResponse](t, body)
	ch = resp.Choices[0]
	if *ch.FinishReason != "stop" || ch.Message.ToolCalls != nil || ch.Message.Content == nil || *ch.Message.Content != testAnswer {
		t.Fatalf("want the answer, got %s", body)
	}
}

// The prompt is rendered as training renders it: tools described in the system prompt, the
// assistant's call in the model's own syntax, tool messages as <tool_response> lines.
func TestChatRendering(t *testing.T) {
	req := testConversation(2)
	req.Messages = append(req.Messages, chatMessage{Role: "tool", Content: json.RawMessage(`[{"type":"text","text":"4"},{"type":"text","text":"3"}]`)})
	msgs, tools, err := renderMessages(&req)
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenizer.Message{
		{Role: "system", Content: "You are a careful calculator.\ncalculator(expression): Evaluate an arithmetic expression.\nCall: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>"},
		{Role: "user", Content: testQuestion},
		{Role: "assistant", Content: testCall},
		{Role: "tool", Content: "<tool_response>42</tool_response>\n<tool_response>43</tool_response>"},
	}
	if len(msgs) != len(want) || !tools.declared["calculator"] {
		t.Fatalf("got %+v", msgs)
	}
	for i := range want {
		if msgs[i].Message != want[i] {
			t.Fatalf("message %d:\n got %q\nwant %q", i, msgs[i].Message, want[i])
		}
	}
	// tool_choice none: no tools described, none parsed.
	req = testConversation(1)
	req.ToolChoice = json.RawMessage(`"none"`)
	msgs, tools, err = renderMessages(&req)
	if err != nil || tools.declared != nil || strings.Contains(msgs[0].Content, "calculator(") {
		t.Fatalf("tool_choice none: %v %v %+v", err, tools, msgs)
	}
}

// Streaming a chat with tools: content deltas, then one tool_calls delta, finish tool_calls,
// usage when asked, [DONE].
func TestChatStream(t *testing.T) {
	_, hs := testServer(t, Options{})
	for turn := 1; turn <= 2; turn++ {
		req := greedy(testConversation(turn))
		req.Stream = true
		req.StreamOpts = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
		req.Logprobs = true
		code, body := post(t, hs.URL+"/v1/chat/completions", "", req)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		var content strings.Builder
		var calls []chatToolCall
		finish := ""
		var usage *usage
		nlp := 0
		for _, ev := range sseEvents(t, body) {
			c := mustDecode[chatResponse](t, []byte(ev))
			if c.Object != "chat.completion.chunk" {
				t.Fatalf("chunk %s", ev)
			}
			if c.Usage != nil {
				usage = c.Usage
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					content.WriteString(*ch.Delta.Content)
				}
				calls = append(calls, ch.Delta.ToolCalls...)
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
				if ch.Logprobs != nil {
					nlp += len(ch.Logprobs.Content)
				}
			}
		}
		if usage == nil || nlp != usage.CompletionTokens {
			t.Fatalf("turn %d: usage %+v, %d logprobs", turn, usage, nlp)
		}
		if turn == 1 && (finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Arguments != `{"expression":"12 + 30"}` || strings.TrimSpace(content.String()) != "") {
			t.Fatalf("turn 1: finish %q calls %+v content %q", finish, calls, content.String())
		}
		if turn == 2 && (finish != "stop" || calls != nil || content.String() != testAnswer) {
			t.Fatalf("turn 2: finish %q calls %+v content %q", finish, calls, content.String())
		}
	}
}

func TestToolCallsSplit(t *testing.T) {
	declared := map[string]bool{"calculator": true}
	content, calls, ok := toolCalls("Let me see. "+testCall+" done", declared, "c")
	if !ok || content != "Let me see.  done" || len(calls) != 1 || calls[0].ID != "c-0" {
		t.Fatalf("%q %+v %v", content, calls, ok)
	}
	for _, text := range []string{"no call", `<tool_call>{"name":"other","arguments":{}}</tool_call>`, `<tool_call>{bad</tool_call>`, `<tool_call>{"name":"calculator"`} {
		if c, calls, ok := toolCalls(text, declared, "c"); ok || calls != nil || c != text {
			t.Fatalf("%q: %q %+v %v", text, c, calls, ok)
		}
	}
}
