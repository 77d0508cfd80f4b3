package serve

import (
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
)

// The score route gives, for tokens the served model sampled at temperature 1, the logprobs the
// engine reported when it sampled them: teacher scoring and generation are one model.
func TestScoreMatchesSampledLogprobs(t *testing.T) {
	_, hs := testServer(t, Options{})
	ck, err := checkpoint.Load(testCheckpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	prompt := ck.Tokenizer.EncodePrompt("", "what is 2+3?")
	req := infer.Request{Prompt: prompt, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 1}, Seed: 7}
	code, body := post(t, hs.URL+"/agentrl/v1/generate", "", req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	c := mustDecode[infer.Completion](t, body)
	seq := append(append([]int32{}, prompt...), c.Tokens...)
	code, body = post(t, hs.URL+"/agentrl/v1/score", "", infer.ScoreRequest{Tokens: seq, Start: len(prompt)})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got scoreResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Logprobs) != len(c.Tokens) {
		t.Fatalf("%d logprobs for %d tokens", len(got.Logprobs), len(c.Tokens))
	}
	for i := range got.Logprobs {
		if d := math.Abs(float64(got.Logprobs[i] - c.Logprobs[i])); d > 2e-4 {
			t.Errorf("token %d: scored %v, sampled with %v", i, got.Logprobs[i], c.Logprobs[i])
		}
	}
	if got.Version != c.Versions[0] {
		t.Errorf("version %d, sampled by %d", got.Version, c.Versions[0])
	}
}

func TestScoreRefusesBadRequests(t *testing.T) {
	_, hs := testServer(t, Options{APIKey: "sekrit"})
	for _, tc := range []struct {
		name, key string
		body      any
		want      int
	}{
		{"no key", "", infer.ScoreRequest{Tokens: []int32{1, 2, 3}, Start: 1}, 401},
		{"start 0", "sekrit", infer.ScoreRequest{Tokens: []int32{1, 2, 3}, Start: 0}, 400},
		{"start at end", "sekrit", infer.ScoreRequest{Tokens: []int32{1, 2, 3}, Start: 3}, 400},
		{"outside vocab", "sekrit", infer.ScoreRequest{Tokens: []int32{1, 1 << 20, 3}, Start: 1}, 400},
		{"negative id", "sekrit", infer.ScoreRequest{Tokens: []int32{1, -1, 3}, Start: 1}, 400},
		{"too long", "sekrit", infer.ScoreRequest{Tokens: make([]int32, 100000), Start: 1}, 400},
		{"unknown field", "sekrit", []byte(`{"tokens":[1,2],"start":1,"temperature":2}`), 400},
		{"not json", "sekrit", []byte(`{"tokens":`), 400},
		{"ok", "sekrit", infer.ScoreRequest{Tokens: []int32{1, 2, 3}, Start: 1}, 200},
	} {
		if code, body := post(t, hs.URL+"/agentrl/v1/score", tc.key, tc.body); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
}

func FuzzScoreBody(f *testing.F) {
	s, _ := testServer(f, Options{})
	f.Add([]byte(`{"tokens":[1,2,3],"start":1}`))
	f.Add([]byte(`{"tokens":[],"start":0}`))
	f.Add([]byte(`{"tokens":[1,2,3],"start":-5}`))
	f.Add([]byte(`{"tokens":[1e9],"start":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := s.parseScore(data)
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("parseScore accepted %q, which Validate refuses: %v", data, err)
		}
	})
}

// The score route follows weight updates, forward and rewound: after each, its logprobs and
// version are those of the weights just loaded.
func TestScoreFollowsWeights(t *testing.T) {
	dir := testCheckpoint(t)
	other := otherWeights(t, dir)
	_, hs := testServer(t, Options{APIKey: "k"})
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	req := infer.ScoreRequest{Tokens: ck.Tokenizer.EncodePrompt("", "what is 2+3? the answer is 5"), Start: 3}
	score := func() scoreResponse {
		t.Helper()
		code, body := post(t, hs.URL+"/agentrl/v1/score", "k", req)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var r scoreResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	update := func(path string, version int32, epoch int64) {
		t.Helper()
		if code, body := post(t, hs.URL+"/agentrl/v1/weights", "k", map[string]any{"path": path, "version": version, "epoch": epoch}); code != 200 {
			t.Fatalf("update: %d %s", code, body)
		}
	}
	first := score()
	update(other, 1, 1)
	moved := score()
	if moved.Version != 1 || slices.Equal(moved.Logprobs, first.Logprobs) {
		t.Fatalf("after an update to version 1: version %d, logprobs unchanged %v", moved.Version, slices.Equal(moved.Logprobs, first.Logprobs))
	}
	update(dir, 1, 2) // a newer epoch's rewind to the first weights
	back := score()
	if back.Version != 1 || !slices.Equal(back.Logprobs, first.Logprobs) {
		t.Fatalf("after the rewind: version %d, logprobs %v, want the first weights' %v", back.Version, back.Logprobs, first.Logprobs)
	}
}
