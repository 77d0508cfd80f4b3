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
	"strconv"
	"sync"
)

// PublishWeights makes version the policy of every server: agentrl servers receive the
// model.safetensors file at path (POST /agentrl/v1/weights?version=N, always with the key); an
// SGLang server loads the checkpoint folder dir from its own disk (POST /update_weights_from_disk
// with weight_version and abort_all_requests false, so generations in flight continue). vLLM has
// no stock route to load weights from disk, so a vLLM server is refused. Servers are updated
// concurrently; each that succeeds serves version from then on (SetVersion), and the error names
// each that failed. A server that failed serves an older policy: it gets no requests until a
// later update succeeds there (Stats reports it Behind; Current counts the others). Requests in
// flight continue under the new weights.
func (r *Router) PublishWeights(ctx context.Context, version int32, path, dir string) error {
	return r.publishAll(ctx, version, path, dir, false)
}

// SyncWeights is PublishWeights for the start of training: an agentrl server that already
// serves exactly version (GET /agentrl/v1/version) is trusted to hold those weights and is left
// as it is; one that serves a newer version is an error for that server (versions only go up:
// restart it, or give it a lower --version).
func (r *Router) SyncWeights(ctx context.Context, version int32, path, dir string) error {
	return r.publishAll(ctx, version, path, dir, true)
}

// Current counts the servers that serve version and are not behind.
func (r *Router) Current(version int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.servers {
		if !s.behind && s.version == version {
			n++
		}
	}
	return n
}

func (r *Router) publishAll(ctx context.Context, version int32, path, dir string, atLeast bool) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.servers))
	for i, s := range r.servers {
		wg.Go(func() {
			var err error
			done := false
			if atLeast && s.Dialect == Agentrl {
				var v int32
				if v, err = r.serverVersion(ctx, s); err == nil {
					switch {
					case v == version:
						done = true
					case v > version:
						err = fmt.Errorf("serves version %d, newer than the trainer's %d: restart it (or give it a lower --version)", v, version)
					}
				}
			}
			if err == nil && !done {
				err = r.publish(ctx, s, version, path, dir)
			}
			r.mu.Lock()
			s.behind = err != nil
			if err == nil {
				s.version = version
			}
			r.mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", s.Name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remote: publishing version %d: %w", version, err)
	}
	return nil
}

// serverVersion asks an agentrl server which policy version it serves.
func (r *Router) serverVersion(ctx context.Context, s *server) (int32, error) {
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, s.URL+"/agentrl/v1/version", nil)
	if err != nil {
		return 0, err
	}
	if s.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("version: HTTP %d: %s", resp.StatusCode, errorMessage(data))
	}
	var out struct {
		Version *int32 `json:"version"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Version == nil {
		return 0, fmt.Errorf("%w: version: %s", errProtocol, errorMessage(data))
	}
	return *out.Version, nil
}

func (r *Router) publish(ctx context.Context, s *server, version int32, path, dir string) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var req *http.Request
	switch s.Dialect {
	case Agentrl:
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		req, err = http.NewRequestWithContext(cctx, http.MethodPost, s.URL+"/agentrl/v1/weights?version="+strconv.Itoa(int(version)), f)
		if err != nil {
			return err
		}
		req.ContentLength = st.Size()
		req.Header.Set("Content-Type", "application/octet-stream")
	case SGLang:
		body, err := json.Marshal(map[string]any{"model_path": dir, "weight_version": strconv.Itoa(int(version)), "abort_all_requests": false, "flush_cache": true})
		if err != nil {
			return err
		}
		req, err = http.NewRequestWithContext(cctx, http.MethodPost, s.URL+"/update_weights_from_disk", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
	default:
		return fmt.Errorf("cannot publish weights to a %s server: it has no route to load them", s.Dialect)
	}
	if s.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, errorMessage(data))
	}
	if s.Dialect == SGLang {
		var out struct {
			Success bool   `json:"success"`
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &out) != nil || !out.Success {
			return fmt.Errorf("update_weights_from_disk failed: %s", errorMessage(data))
		}
	}
	return nil
}
