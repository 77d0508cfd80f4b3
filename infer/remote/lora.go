package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// A run that trains a LoRA adapter publishes to vLLM through vLLM's stock LoRA routes (vLLM has
// none that loads full weights from disk). The published folder holds the adapter in PEFT's
// format beside the base (adapter_config.json, adapter_model.safetensors); each version is
// loaded under a name of its own, <model>-v<N> (POST /v1/load_lora_adapter with lora_name and
// lora_path: the server reads the folder from its own disk), generation's requests name that
// adapter as their model from then on, and the adapter of the previous version is unloaded after
// the switch (POST /v1/unload_lora_adapter), so requests already in flight under it finish. Each
// call has the router's deadline. The server must run with --enable-lora, a --max-lora-rank at
// least the adapter's, and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; its base model must be the
// base the run trains the adapter on.

// adapterConfigFile marks a published folder that holds a LoRA adapter in PEFT's format.
const adapterConfigFile = "adapter_config.json"

// HasAdapter reports whether the folder dir holds a PEFT LoRA adapter.
func HasAdapter(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, adapterConfigFile))
	return err == nil
}

// AdapterName is the name under which version of the adapter is loaded on a vLLM server whose
// served model is model ("policy" when the server's model is not named).
func AdapterName(model string, version int32) string {
	if model == "" {
		model = "policy"
	}
	return fmt.Sprintf("%s-v%d", model, version)
}

// errAlreadyLoaded is vLLM's answer to a load under a name it has: a restarted run publishing a
// version that its killed process had loaded.
func alreadyLoaded(status int, msg string) bool {
	return status == http.StatusBadRequest && strings.Contains(msg, "already been loaded")
}

// loraError is a failed call of a LoRA route.
type loraError struct {
	route  string
	status int // 0: no answer
	msg    string
}

func (e *loraError) Error() string {
	if e.status == 0 {
		return fmt.Sprintf("%s: %s", e.route, e.msg)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.route, e.status, e.msg)
}

// publishLoRA loads the adapter in dir on the vLLM server s as version and switches its
// requests to it, then unloads the adapter it replaces. switched reports whether s serves
// version (an error with switched true is an unload that failed: the old adapter stays loaded).
func (r *Router) publishLoRA(ctx context.Context, s *server, version int32, dir string, probe *SyncProbe) (switched bool, res *SyncResult, err error) {
	if !HasAdapter(dir) {
		return false, nil, errors.New("vLLM has no stock route that loads full weights from disk: it serves a policy the run trains only as a LoRA adapter (a lora block on the RL phase), through /v1/load_lora_adapter")
	}
	name := AdapterName(s.Model, version)
	load := map[string]string{"lora_name": name, "lora_path": dir}
	err = r.loraCall(ctx, s, "/v1/load_lora_adapter", load)
	var le *loraError
	if errors.As(err, &le) && alreadyLoaded(le.status, le.msg) {
		// Loaded by an earlier process of this run under the same version, maybe with other
		// weights: replace it.
		if err = r.loraCall(ctx, s, "/v1/unload_lora_adapter", map[string]string{"lora_name": name}); err == nil {
			err = r.loraCall(ctx, s, "/v1/load_lora_adapter", load)
		}
	}
	if err != nil {
		return false, nil, fmt.Errorf("loading adapter %s from %s: %w", name, dir, err)
	}
	if probe != nil {
		// Checked under its own name before any request is sent to it; a failed check unloads
		// it (best effort: the server keeps serving the adapter it had).
		srv := s.Server
		srv.Model = name
		sr, err := r.checkSync(ctx, s, &srv, version, probe)
		if err != nil {
			r.mu.Lock()
			inUse := s.adapter == name
			r.mu.Unlock()
			if !inUse {
				r.loraCall(ctx, s, "/v1/unload_lora_adapter", map[string]string{"lora_name": name})
			}
			var pe *SyncProbeError
			if errors.As(err, &pe) && pe.Err == nil {
				return false, &sr, err
			}
			return false, nil, err
		}
		res = &sr
	}
	r.mu.Lock()
	old := s.adapter
	s.adapter, s.adapterVersion = name, version
	r.mu.Unlock()
	if old == "" || old == name {
		return true, res, nil
	}
	if err := r.loraCall(ctx, s, "/v1/unload_lora_adapter", map[string]string{"lora_name": old}); err != nil {
		return true, res, fmt.Errorf("serving adapter %s, but the adapter it replaced, %s, stays loaded: %w", name, old, err)
	}
	return true, res, nil
}

// loraCall posts body to one of vLLM's LoRA routes under the router's deadline. vLLM answers
// 200 with a plain-text "Success: ..." line, and an error as a JSON ErrorResponse.
func (r *Router) loraCall(ctx context.Context, s *server, route string, body map[string]string) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, s.URL+route, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return &loraError{route: route, msg: fmt.Sprintf("no answer within %v", r.opts.Timeout)}
		}
		return &loraError{route: route, msg: err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &loraError{route: route, msg: "reading the answer: " + err.Error()}
	}
	return loraAnswer(route, resp.StatusCode, data)
}

// loraAnswer reads the answer of a LoRA route: 200 is success (vLLM's body is a message, not
// checked beyond that), anything else an error carrying the server's message.
func loraAnswer(route string, status int, data []byte) error {
	if status == http.StatusOK {
		return nil
	}
	var flat struct {
		Object  string `json:"object"`
		Message string `json:"message"`
		Detail  string `json:"detail"`
	}
	msg := errorMessage(data)
	if json.Unmarshal(data, &flat) == nil {
		switch {
		case flat.Object == "error" && flat.Message != "": // vLLM before 0.10
			msg = flat.Message
		case status == http.StatusNotFound && flat.Detail == "Not Found": // no such route
			msg = "the server has no runtime LoRA routes: start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
		}
	}
	return &loraError{route: route, status: status, msg: msg}
}

// requestServer is the Server a request to s is encoded for, and the policy version it will
// be generated by when that is known at encoding time: a vLLM server serving an adapter is
// asked for it by name, so its tokens are that adapter's version whatever is published while
// the request is in flight.
func (r *Router) requestServer(s *server) (srv *Server, version int32, exact bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.adapter == "" {
		return &s.Server, 0, false
	}
	c := s.Server
	c.Model = s.adapter
	return &c, s.adapterVersion, true
}
