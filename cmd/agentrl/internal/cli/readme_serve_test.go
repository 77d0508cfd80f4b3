package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/pipeline"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
)

// readmeRequest is one `curl -s localhost:8000/PATH -d '…'` of the README's serve example.
type readmeRequest struct{ path, body string }

// readmeServeExample returns the checkpoint folder and the requests of README.md's fenced block
// that starts `agentrl serve --checkpoint`, as a shell would pass them to curl.
func readmeServeExample(t *testing.T) (string, []readmeRequest) {
	t.Helper()
	data, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sh\n(agentrl serve --checkpoint [^\n]*&\n.*?)```").FindStringSubmatch(string(data))
	if block == nil {
		t.Fatal("README.md has no sh block that starts `agentrl serve --checkpoint … &`")
	}
	text := block[1]
	first, rest, _ := strings.Cut(text, "\n")
	ck := strings.TrimSuffix(strings.TrimPrefix(first, "agentrl serve --checkpoint "), " &")
	var reqs []readmeRequest
	curl := regexp.MustCompile(`(?s)curl -s localhost:8000(/\S+) -d '([^']*)'`)
	for _, m := range curl.FindAllStringSubmatch(rest, -1) {
		reqs = append(reqs, readmeRequest{path: m[1], body: m[2]})
	}
	if n := strings.Count(rest, "curl "); n != len(reqs) || n == 0 {
		t.Fatalf("README.md's serve example has %d curl commands, %d of the form `curl -s localhost:8000/PATH -d '…'`:\n%s", n, len(reqs), text)
	}
	return ck, reqs
}

// readmeTool is a tool of the README's chat request, described as the server describes it.
type readmeTool struct {
	name, desc string
	schema     json.RawMessage
}

func (r readmeTool) Name() string            { return r.name }
func (r readmeTool) Description() string     { return r.desc }
func (r readmeTool) Schema() json.RawMessage { return r.schema }
func (r readmeTool) Call(context.Context, json.RawMessage) (string, error) {
	return "", nil
}

// lockedBuffer collects serve's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Item 5 of issue 29: the README's serve example, run as written against a served checkpoint,
// gives the policy the system prompt it was trained with (the checkpoint's prompts.json), and the
// server accepts each request. A trained policy is not in the default suite, so the answer itself
// is not checked: the prompt, the request's shape and that the server answers are.
func TestReadmeServeExample(t *testing.T) {
	ckPath, reqs := readmeServeExample(t)
	if ckPath != "runs/calc/checkpoints/best" {
		t.Fatalf("the README serves %q, not calc's best checkpoint", ckPath)
	}
	// The checkpoint records calc's training prompt as the trainer does (pipeline's
	// trainingPrompts: the system prompt of the first held-out task, tools described).
	envs := all.Builtins()
	spec, err := envs.Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	trained, err := pipeline.SystemPrompt(context.Background(), envs.New, "calc", spec.Heldout.Lo)
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(t.TempDir(), "best")
	tok, err := tokenizer.Train([]string{trained, "What is 123456 * 789? Answer: 97406784"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Vocab: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 32, MaxSeq: 512, RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(ck, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"calc": trained})
	if err := os.WriteFile(filepath.Join(ck, "prompts.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	// The chat request's system message and tools render to the training prompt, as the server
	// renders them (the system message, then env.DescribeTools of the request's tools).
	var chat struct {
		Messages []struct{ Role, Content string } `json:"messages"`
		Tools    []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	var chatBody string
	for _, r := range reqs {
		if r.path == "/v1/chat/completions" {
			chatBody = r.body
		}
	}
	if chatBody == "" {
		t.Fatal("the README's serve example has no chat request")
	}
	if err := json.Unmarshal([]byte(chatBody), &chat); err != nil {
		t.Fatalf("the README's chat request is not JSON: %v", err)
	}
	if len(chat.Messages) == 0 || chat.Messages[0].Role != "system" {
		t.Fatalf("the README's chat request gives no system prompt: %+v", chat.Messages)
	}
	var tools []tool.Tool
	for _, tl := range chat.Tools {
		tools = append(tools, readmeTool{tl.Function.Name, tl.Function.Description, tl.Function.Parameters})
	}
	rendered := chat.Messages[0].Content
	if desc := env.DescribeTools(tools); desc != "" {
		rendered += "\n" + desc
	}
	var recorded map[string]string
	raw, err := os.ReadFile(filepath.Join(ck, "prompts.json"))
	if err != nil || json.Unmarshal(raw, &recorded) != nil {
		t.Fatalf("prompts.json: %v", err)
	}
	if rendered != recorded["calc"] {
		t.Fatalf("the README's chat request renders the system prompt\n%q\nthe checkpoint was trained with\n%q", rendered, recorded["calc"])
	}

	// Serve the checkpoint and send each request as curl -s -d sends it.
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--checkpoint", ck, "--addr", "127.0.0.1:0", "--slots", "2"}, &out, &out)
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s of its context's end")
		}
	}()
	addrRe := regexp.MustCompile(`on http://(\S+) `)
	var base string
	for deadline := time.Now().Add(30 * time.Second); base == ""; {
		if m := addrRe.FindStringSubmatch(out.String()); m != nil {
			base = "http://" + m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not say where it listens within 30s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	post := func(path, body string) (int, []byte) {
		t.Helper()
		// curl -d: a POST whose body is the argument, sent as a form.
		resp, err := client.Post(base+path, "application/x-www-form-urlencoded", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return resp.StatusCode, data
	}
	type usage struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	for _, r := range reqs {
		code, data := post(r.path, r.body)
		if code != http.StatusOK {
			t.Fatalf("the README's request to %s: status %d: %s", r.path, code, data)
		}
		switch r.path {
		case "/v1/chat/completions":
			var resp struct {
				usage
				Choices []struct {
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(data, &resp); err != nil || len(resp.Choices) != 1 || resp.Choices[0].FinishReason == "" {
				t.Fatalf("the README's chat request: %v: %s", err, data)
			}
			// The server's prompt is the training prompt: the same request with the recorded
			// prompt as its system message and no tools has as many prompt tokens.
			plain, _ := json.Marshal(map[string]any{
				"messages":   []map[string]string{{"role": "system", "content": recorded["calc"]}, {"role": "user", "content": chat.Messages[len(chat.Messages)-1].Content}},
				"max_tokens": 1, "temperature": 0,
			})
			code, data := post(r.path, string(plain))
			var want usage
			if code != http.StatusOK || json.Unmarshal(data, &want) != nil {
				t.Fatalf("the training prompt's request: status %d: %s", code, data)
			}
			if resp.Usage.PromptTokens != want.Usage.PromptTokens || want.Usage.PromptTokens == 0 {
				t.Fatalf("the README's chat request has %d prompt tokens, the training prompt %d", resp.Usage.PromptTokens, want.Usage.PromptTokens)
			}
		case "/agentrl/v1/generate":
			var resp struct {
				Tokens []int32 `json:"tokens"`
				Finish string  `json:"finish"`
			}
			if err := json.Unmarshal(data, &resp); err != nil || len(resp.Tokens) == 0 || resp.Finish == "" {
				t.Fatalf("the README's generate request: %v: %s", err, data)
			}
		default:
			t.Fatalf("the README's serve example calls %s, which this test does not check", r.path)
		}
	}
}
