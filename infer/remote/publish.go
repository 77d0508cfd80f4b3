package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
)

// PublishWeights makes version the policy of every server: agentrl servers receive the
// model.safetensors file at path (POST /agentrl/v1/weights?version=N&epoch=E, always with the
// key; E is Options.Epoch, left out when 0); an SGLang server loads the checkpoint folder dir
// from its own disk (POST /update_weights_from_disk with weight_version and abort_all_requests
// false, so generations in flight continue); a vLLM server loads the LoRA adapter in dir under
// a versioned name through its stock LoRA routes (lora.go) and is refused a folder without
// one: it has no stock route that loads full weights from disk. Servers are updated concurrently; each that succeeds serves
// version from then on (SetVersion), and the error names each that failed. A server that failed
// serves an older policy: it gets no requests until a later update succeeds there (Stats reports
// it Behind; Current counts the others). Requests in flight continue under the new weights.
//
// An agentrl server takes versions in order within an epoch and any version of a newer epoch,
// so a router whose epoch is newer than every earlier publisher's (a resumed trainer's) brings
// the servers to its version even when they serve a higher one; one whose epoch is older than
// the server's is refused there (see agentrl serve's weights route).
func (r *Router) PublishWeights(ctx context.Context, version int32, path, dir string) error {
	_, err := r.PublishChecked(ctx, version, path, dir, nil)
	return err
}

// PublishChecked is PublishWeights that, with probe non-nil, checks every server that loaded
// the version before it serves it (syncprobe.go): it returns each such server's probe result,
// and an error that wraps a *SyncProbeError for each server that does not serve the weights
// published. Such a server is left behind (no requests); the caller should stop.
func (r *Router) PublishChecked(ctx context.Context, version int32, path, dir string, probe *SyncProbe) ([]SyncResult, error) {
	if probe != nil {
		if err := probe.Validate(); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(r.servers))
	results := make([]*SyncResult, len(r.servers))
	for i, s := range r.servers {
		wg.Go(func() {
			switched, res, err := r.publish(ctx, s, version, path, dir, probe)
			results[i] = res
			r.mu.Lock()
			s.behind = err != nil && !switched
			if err == nil || switched {
				s.version = version
			}
			r.mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", s.Name, err)
			}
		})
	}
	wg.Wait()
	var out []SyncResult
	for _, res := range results {
		if res != nil {
			out = append(out, *res)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("remote: publishing version %d: %w", version, err)
	}
	return out, nil
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

// publish loads version on s and, with probe, checks it there (res is then the probe's result
// when the server answered it). switched reports whether s serves version.
func (r *Router) publish(ctx context.Context, s *server, version int32, path, dir string, probe *SyncProbe) (switched bool, res *SyncResult, err error) {
	if s.Dialect == VLLM {
		return r.publishLoRA(ctx, s, version, dir, probe)
	}
	if err = r.publishFull(ctx, s, version, path, dir); err != nil {
		return false, nil, err
	}
	if probe == nil {
		return true, nil, nil
	}
	// The server computes with the new weights from here on; one that fails the check is left
	// behind, so nothing more is sampled from it.
	sr, err := r.checkSync(ctx, s, &s.Server, version, probe)
	if err != nil {
		var pe *SyncProbeError
		if errors.As(err, &pe) && pe.Err == nil {
			return false, &sr, err
		}
		return false, nil, err
	}
	return true, &sr, nil
}

func (r *Router) publishFull(ctx context.Context, s *server, version int32, path, dir string) error {
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
		q := url.Values{"version": {strconv.Itoa(int(version))}}
		if r.opts.Epoch != 0 {
			q.Set("epoch", strconv.FormatInt(r.opts.Epoch, 10))
		}
		req, err = http.NewRequestWithContext(cctx, http.MethodPost, s.URL+"/agentrl/v1/weights?"+q.Encode(), f)
		if err != nil {
			return err
		}
		req.ContentLength = st.Size()
		req.Header.Set("Content-Type", "application/octet-stream")
	case SGLang:
		if HasAdapter(dir) {
			return errors.New("update_weights_from_disk loads the base weights alone, not the LoRA adapter beside them")
		}
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
