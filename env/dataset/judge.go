package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentrl/agentrl/internal/envref"
	"github.com/agentrl/agentrl/reward"
)

// JudgeConfig is a judge verifier: a model behind an OpenAI-compatible chat-completions
// endpoint grades each final turn by a rubric (reward.Judge: the last "Score: N" of its reply,
// over max_score). A reply with no score in range, or one past the timeout, scores fallback; a
// server that fails or answers nonsense makes the episode env_error, never a score.
type JudgeConfig struct {
	// URL is the API's base address (http://127.0.0.1:8000/v1): requests go to
	// URL/chat/completions.
	URL string `yaml:"url"`
	// Model is the model name sent with each request.
	Model string `yaml:"model"`
	// APIKey is "${NAME}": the environment variable NAME holds the key, sent as a bearer token.
	APIKey string `yaml:"api_key,omitempty"`
	// MaxTokens bounds the judge's reply (512).
	MaxTokens          int `yaml:"max_tokens,omitempty"`
	reward.JudgeConfig `yaml:",inline"`
}

// Defaults of a judge block.
const (
	DefaultJudgeMaxTokens = 512
	DefaultJudgeTimeout   = time.Minute
	DefaultJudgeMaxScore  = 10
	maxJudgeReply         = 1 << 20
)

func (j JudgeConfig) withDefaults() JudgeConfig {
	if j.MaxTokens == 0 {
		j.MaxTokens = DefaultJudgeMaxTokens
	}
	if j.Timeout == 0 {
		j.Timeout = DefaultJudgeTimeout
	}
	if j.MaxScore == 0 {
		j.MaxScore = DefaultJudgeMaxScore
	}
	return j
}

// Validate reports the block's problems, each naming its key.
func (j JudgeConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("judge."+format, a...)) }
	u, err := url.Parse(j.URL)
	switch {
	case j.URL == "":
		bad("url: the base address of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		bad("url %q: an http:// or https:// address", j.URL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		bad("url: no credentials, query or fragment (give the key as api_key)")
	}
	if strings.TrimSpace(j.Model) == "" {
		bad("model: the model name the server serves")
	}
	if j.APIKey != "" && !envref.IsRef(j.APIKey) {
		bad("api_key: write ${NAME} and put the key in the environment variable NAME, so the saved configuration does not hold it")
	}
	if j.MaxTokens < 0 || j.MaxTokens > 1<<16 {
		bad("max_tokens %d: in [1, 65536] (default %d)", j.MaxTokens, DefaultJudgeMaxTokens)
	}
	if err := j.withDefaults().JudgeConfig.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("judge: %w", err))
	}
	return errors.Join(errs...)
}

// chatJudge is reward.TextGenerator over chat completions.
type chatJudge struct {
	c      JudgeConfig
	key    string
	client *http.Client
}

func newChatJudge(c JudgeConfig) (*reward.Judge, error) {
	c = c.withDefaults()
	g := &chatJudge{c: c, client: &http.Client{}}
	if c.APIKey != "" {
		key, err := envref.Resolve(c.APIKey)
		if err != nil {
			return nil, fmt.Errorf("judge.api_key: %w", err)
		}
		g.key = key
	}
	return reward.NewJudge(g, c.JudgeConfig)
}

// Complete asks the judge with the rubric as the one user message, greedily.
func (g *chatJudge) Complete(ctx context.Context, prompt string) (string, error) {
	body, err := json.Marshal(map[string]any{
		"model":       g.c.Model,
		"messages":    []map[string]string{{"role": "user", "content": prompt}},
		"temperature": 0,
		"max_tokens":  g.c.MaxTokens,
	})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(g.c.URL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if g.key != "" {
		req.Header.Set("Authorization", "Bearer "+g.key)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("judge: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJudgeReply+1))
	if err != nil {
		return "", fmt.Errorf("judge: reading the reply: %w", err)
	}
	if len(data) > maxJudgeReply {
		return "", fmt.Errorf("judge: a reply over %d bytes", maxJudgeReply)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("judge: %s: %s", resp.Status, capText(string(data), 200))
	}
	return decodeChatReply(data)
}

// decodeChatReply reads the content of the first choice of a chat-completions reply.
func decodeChatReply(data []byte) (string, error) {
	var r struct {
		Choices []struct {
			Message *struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("judge: the reply is not a chat completion: %v (%s)", err, capText(string(data), 120))
	}
	if len(r.Choices) == 0 || r.Choices[0].Message == nil || r.Choices[0].Message.Content == nil {
		return "", fmt.Errorf("judge: the reply has no choices[0].message.content (%s)", capText(string(data), 120))
	}
	return *r.Choices[0].Message.Content, nil
}

func capText(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
