package serve

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The official Go client completes, chats with tools, streams and reads logprobs.
func TestOpenAIGoClient(t *testing.T) {
	_, hs := testServer(t, Options{APIKey: "peer-key"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey("peer-key"), option.WithMaxRetries(0))

	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     "agentrl",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("the agent")},
		MaxTokens: openai.Int(6), Seed: openai.Int(3), Logprobs: openai.Int(2), N: openai.Int(2),
	}, option.WithJSONSet("return_token_ids", true), option.WithJSONSet("ignore_eos", true))
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 2 || len(comp.Choices[0].Logprobs.TokenLogprobs) != 6 || comp.Usage.CompletionTokens != 12 {
		t.Fatalf("completion %s", comp.RawJSON())
	}
	var ids []int32
	if err := json.Unmarshal([]byte(comp.Choices[0].JSON.ExtraFields["token_ids"].Raw()), &ids); err != nil || len(ids) != 6 {
		t.Fatalf("token_ids %v: %v", ids, err)
	}
	// Token ids as the prompt.
	if _, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: "agentrl", MaxTokens: openai.Int(2),
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{int64(ids[0]), int64(ids[1])}}}); err != nil {
		t.Fatal(err)
	}

	// Streaming completion: the text streamed is the text of the same seeded request.
	stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "agentrl", MaxTokens: openai.Int(6), Seed: openai.Int(3),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("the agent")}}, option.WithJSONSet("ignore_eos", true))
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			if ch.Index == 0 {
				text.WriteString(ch.Text)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != comp.Choices[0].Text {
		t.Fatalf("streamed %q, completed %q", text.String(), comp.Choices[0].Text)
	}

	// Chat with tools: the call comes back as tool_calls; its result goes back as a tool message.
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "calculator", Description: openai.String("Evaluate an arithmetic expression."),
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"expression": map[string]any{"type": "string"}}, "required": []string{"expression"}},
	})}
	params := openai.ChatCompletionNewParams{
		Model:       "agentrl",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a careful calculator."), openai.UserMessage(testQuestion)},
		Tools:       tools,
		Temperature: openai.Float(0),
		Logprobs:    openai.Bool(true), TopLogprobs: openai.Int(2),
	}
	chat, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	msg := chat.Choices[0].Message
	if chat.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "calculator" ||
		len(chat.Choices[0].Logprobs.Content) == 0 || len(chat.Choices[0].Logprobs.Content[0].TopLogprobs) == 0 {
		t.Fatalf("chat %s", chat.RawJSON())
	}
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("42", msg.ToolCalls[0].ID))
	chat, err = client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if chat.Choices[0].FinishReason != "stop" || chat.Choices[0].Message.Content != testAnswer {
		t.Fatalf("answer %s", chat.RawJSON())
	}

	// Streaming chat, accumulated by the client's own accumulator.
	params.Messages = params.Messages[:2]
	cs := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 ||
		acc.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"expression":"12 + 30"}` {
		t.Fatalf("accumulated stream %+v", acc.Choices)
	}

	// Errors arrive as the client's API errors.
	_, err = client.Completions.New(ctx, openai.CompletionNewParams{Model: "agentrl", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("a")}, Logprobs: openai.Int(50)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != typeInvalid {
		t.Fatalf("want a 400 API error, got %v", err)
	}
	bad := openai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	if _, err := bad.Models.List(ctx); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("want 401, got %v", err)
	}
	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "agentrl" {
		t.Fatalf("models %v %v", models, err)
	}
}

// The official npm client, run by node against the server: scripts/peers/openai_peer.mjs.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; run scripts/setup")
	}
	peers, err := filepath.Abs(filepath.Join("..", "..", "scripts", "peers"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(peers, "node_modules", "openai", "package.json")); err != nil {
		t.Skip("npm package openai is not installed; run scripts/setup")
	}
	_, hs := testServer(t, Options{APIKey: "peer-key"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(peers, "openai_peer.mjs"))
	cmd.Dir = peers
	cmd.Env = append(os.Environ(), "AGENTRL_BASE_URL="+hs.URL+"/v1", "AGENTRL_API_KEY=peer-key",
		"PEER_QUESTION="+testQuestion, "PEER_ANSWER="+testAnswer)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ok") {
		t.Fatalf("node client said:\n%s", out)
	}
	t.Logf("node client: %s", strings.TrimSpace(string(out)))
}

// The official Go client's Responses API: a tool call, its answer by previous_response_id, and a
// stream whose completed response holds the call.
func TestOpenAIGoClientResponses(t *testing.T) {
	_, hs := testServer(t, Options{APIKey: "peer-key"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey("peer-key"), option.WithMaxRetries(0))
	tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("calculator",
		map[string]any{"type": "object", "properties": map[string]any{"expression": map[string]any{"type": "string"}}, "required": []string{"expression"}}, false)}
	tools[0].OfFunction.Description = openai.String("Evaluate an arithmetic expression.")
	params := responses.ResponseNewParams{Model: "agentrl", Instructions: openai.String("You are a careful calculator."), Tools: tools,
		Temperature: openai.Float(0), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(testQuestion)}}
	first, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var callID, args string
	for _, it := range first.Output {
		if it.Type == "function_call" && it.Name == "calculator" {
			callID, args = it.CallID, it.Arguments.OfString
		}
	}
	if callID == "" || args != `{"expression":"12 + 30"}` {
		t.Fatalf("first response %s", first.RawJSON())
	}
	out := responses.ResponseInputItemParamOfFunctionCallOutput("42")
	out.OfFunctionCallOutput.CallID = openai.String(callID)
	next := params
	next.PreviousResponseID = openai.String(first.ID)
	next.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}
	second, err := client.Responses.New(ctx, next)
	if err != nil || second.OutputText() != testAnswer {
		t.Fatalf("second response %v: %v", second, err)
	}
	stream := client.Responses.NewStreaming(ctx, params)
	var completed *responses.Response
	for stream.Next() {
		if e := stream.Current(); e.Type == "response.completed" {
			r := e.AsResponseCompleted().Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil || completed == nil {
		t.Fatalf("stream: %v, completed %v", err, completed)
	}
	if n := len(completed.Output); n != 1 || completed.Output[0].Arguments.OfString != args {
		t.Fatalf("streamed response %s", completed.RawJSON())
	}
}
