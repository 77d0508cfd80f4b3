package serve

import (
	"errors"
	"testing"
)

// fuzzServer is a server over the test checkpoint for the decoders; nothing is generated.
func fuzzServer(f *testing.F) *Server {
	srv, err := Open(testCheckpoint(f), Options{Slots: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	return srv
}

// checkRefusal: a request the decoder refuses gets a 4xx OpenAI-style error, never a panic or a 500.
func checkRefusal(t *testing.T, err error) {
	if err == nil {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) || ae.status < 400 || ae.status > 499 || ae.message == "" || ae.typ == "" {
		t.Fatalf("refusal %v is not a 4xx API error", err)
	}
}

func FuzzCompletionRequest(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []string{
		`{"prompt": "the agent", "max_tokens": 5, "n": 2, "logprobs": 3, "stop": ["a", "b"], "seed": 1}`,
		`{"prompt": [[1, 2], "x"], "echo": true, "return_token_ids": true, "stop_token_ids": [3]}`,
		`{"prompt": [1, 2, 3], "temperature": 0, "top_p": 0.5, "top_k": -1, "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": "", "best_of": 2, "suffix": "x", "logit_bias": {"1": 2}}`, `null`, `[]`, `{"prompt": {}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := srv.parseCompletion(data)
		checkRefusal(t, err)
		if err != nil {
			return
		}
		if len(p.specs) == 0 || len(p.specs) > maxPrompts*maxN {
			t.Fatalf("%d generations", len(p.specs))
		}
		for _, s := range p.specs {
			if err := srv.checkRequest(s.req, "prompt"); err != nil || s.req.MaxTokens+len(s.req.Prompt) > srv.maxLen {
				t.Fatalf("accepted a request the engine refuses: %+v: %v", s.req, err)
			}
		}
	})
}

func FuzzChatRequest(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []string{
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]}`,
		`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}}]}, {"role": "tool", "tool_call_id": "1", "content": "2"}], "tool_choice": "auto"}`,
		`{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 4, "n": 3, "tool_choice": {"type": "function"}}`,
		`{"messages": [{"role": "developer", "content": 5}]}`, `{"messages": []}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := srv.parseChat(data)
		checkRefusal(t, err)
		if err != nil {
			return
		}
		for _, s := range p.specs {
			if err := srv.checkRequest(s.req, "messages"); err != nil || s.req.MaxTokens+len(s.req.Prompt) > srv.maxLen {
				t.Fatalf("accepted a request the engine refuses: %+v: %v", s.req, err)
			}
		}
	})
}

func FuzzGenerateRequest(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []string{
		`{"prompt": [1, 2, 3], "max_tokens": 4, "sampling": {"temperature": 1, "top_k": 5, "top_p": 0.9}, "stop": [2], "seed": 7}`,
		`{"prompt": [], "max_tokens": 0}`, `{"prompt": [1], "max_tokens": 1, "extra": 1}`, `{"prompt": [99999999999]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := srv.parseGenerate(data)
		checkRefusal(t, err)
		if err == nil && srv.checkRequest(req, "prompt") != nil {
			t.Fatal("accepted a request the engine refuses")
		}
	})
}

// Streaming text: whatever the tokens, the pieces shown add up to the final text.
func FuzzTextState(f *testing.F) {
	srv := fuzzServer(f)
	f.Add([]byte{10, 20, 30, 2, 40}, "ab", true)
	f.Fuzz(func(t *testing.T, toks []byte, stop string, hold bool) {
		spec := genSpec{}
		if stop != "" && len(stop) <= maxStopBytes {
			spec.stopStrs = []string{stop}
		}
		if hold {
			spec.hold = []string{"<tool_call>"}
		}
		ts := newTextState(srv, spec)
		var shown string
		for _, b := range toks {
			d, hit := ts.add(int32(b) % int32(srv.tok.VocabSize()))
			shown += d.text
			if hit {
				break
			}
		}
		shown += ts.flush()
		final := ts.final()
		if hold {
			if len(shown) > len(final) || final[:len(shown)] != shown {
				t.Fatalf("shown %q is not a prefix of %q", shown, final)
			}
			return
		}
		if shown != final {
			t.Fatalf("shown %q, final %q", shown, final)
		}
	})
}

// The weight route's two forms: a JSON body, and the query of a pushed file. What is accepted has
// a version and an epoch that are not negative, and the JSON form a folder.
func FuzzWeightsRequest(f *testing.F) {
	for _, s := range []string{
		`{"path": "/ckpt/v3", "version": 3}`, `{"path": "/ckpt", "version": 3, "epoch": 1700000000000}`,
		`{"path": "", "version": 1}`, `{"version": -1, "path": "x"}`, `{"path": "x", "version": 1, "epoch": null, "extra": 2}`,
		`version=4`, `version=4&epoch=17`, `version=-1`, `epoch=3`, `version=1&epoch=%zz`, `version=99999999999`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, parse := range []func() (weightsUpdate, error){
			func() (weightsUpdate, error) { return parseWeightsJSON([]byte(s)) },
			func() (weightsUpdate, error) { return parseWeightsQuery(s) },
		} {
			u, err := parse()
			checkRefusal(t, err)
			if err == nil && (u.version < 0 || (u.epoch != nil && *u.epoch < 0)) {
				t.Fatalf("accepted %+v", u)
			}
		}
		if u, err := parseWeightsJSON([]byte(s)); err == nil && u.path == "" {
			t.Fatal("accepted a JSON update without a folder")
		}
	})
}

func FuzzTokenizeRequest(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []string{`{"text": "the agent calls a tool"}`, `{"text": "héllo ✓ <tool_call>"}`, `{"text": 5}`, `{"tokens": [1]}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		text, err := parseTokenize(data)
		checkRefusal(t, err)
		if err == nil {
			for _, id := range srv.tok.Encode(text) {
				if id < 0 || int(id) >= srv.mcfg.Vocab {
					t.Fatalf("token %d outside the vocabulary", id)
				}
			}
		}
	})
}

func FuzzDetokenizeRequest(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []string{`{"tokens": [10, 20, 30]}`, `{"tokens": [-1]}`, `{"tokens": [99999]}`, `{"tokens": null}`, `{"text": "x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := srv.parseDetokenize(data)
		checkRefusal(t, err)
	})
}

func FuzzResponsesRequest(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []string{
		`{"input": "hi", "instructions": "be brief", "max_output_tokens": 4, "temperature": 0.5, "top_p": 0.9}`,
		`{"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}, {"type": "function_call", "call_id": "c", "name": "calc", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "2"}], "tools": [{"type": "function", "name": "calc", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}], "tool_choice": "required"}`,
		`{"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object", "properties": {"a": {"enum": [1, "b", null]}}, "required": ["a"]}}}}`,
		`{"input": "x", "previous_response_id": "resp_x", "stream": true}`,
		`{"input": [{"type": "reasoning"}]}`, `{"input": []}`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := srv.parseResponses(data)
		checkRefusal(t, err)
		if err != nil {
			return
		}
		if len(p.chat.specs) != 1 {
			t.Fatalf("%d generations", len(p.chat.specs))
		}
		if err := srv.checkRequest(p.chat.specs[0].req, "input"); err != nil {
			t.Fatalf("accepted a request the engine refuses: %v", err)
		}
	})
}
