package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/agentrl/agentrl/infer"
)

// Info is what a server said about itself when it was probed.
type Info struct {
	Name string
	// Model is the id of the model the server serves (agentrl, vLLM) or its model path (SGLang).
	Model string
	// MaxContext is the longest prompt plus completion the server takes (0: not reported).
	MaxContext int
	// Release is the server software's version when it reports one (vLLM's /version, SGLang's
	// /get_server_info), e.g. "0.11.0"; empty otherwise.
	Release string
	// Unreachable is why a server that did not answer (transport error, deadline, 5xx) was
	// ejected at start; nil for a server that passed.
	Unreachable error
}

// ProbeOptions say what a run needs of every server.
type ProbeOptions struct {
	// Request is generated once on every server (its MaxTokens is set to 1): the completion must
	// decode under the server's dialect with token ids and one logprob and version per token, as
	// every completion of the run must. Its prompt should be tokens of the run's vocabulary.
	Request infer.Request
	// MaxContext, when positive, is the longest sequence the run generates: a server that reports
	// a shorter max_model_len is refused.
	MaxContext int
}

// Minimum releases the dialects rely on: vLLM's return_token_ids came in 0.10.2; SGLang's
// output_token_logprobs with token ids and input_ids requests in 0.4.6.
var minRelease = map[Dialect][3]int{VLLM: {0, 10, 2}, SGLang: {0, 4, 6}}

// Probe asks every server, in parallel and each under the call deadline, what it serves, and
// generates one token on each through its dialect, before a run trusts it with an episode:
//
//   - agentrl: GET /v1/models names one model; its max_model_len must cover MaxContext.
//   - vLLM: GET /v1/models must list the configured model (Server.Model) with a max_model_len
//     covering MaxContext; GET /version, when answered, must be at least 0.10.2, the first release
//     that returns completion token ids.
//   - SGLang: GET /get_model_info must say is_generation; GET /get_server_info's version, when
//     given, must be at least 0.4.6.
//
// Then the one-token generation must come back with token ids and logprobs one to one, which is
// where a server that ignores return_token_ids or return_logprob shows itself. Every server must
// pass: a run does not start on a server it cannot use, and the error names each server that
// failed and why. Probe does not change the servers' health or counters.
func (r *Router) Probe(ctx context.Context, o ProbeOptions) ([]Info, error) {
	req := o.Request
	req.MaxTokens = 1
	if len(req.Prompt) == 0 {
		return nil, errors.New("remote: probe: the probe request has no prompt")
	}
	if err := req.Sampling.Validate(); err != nil {
		return nil, fmt.Errorf("remote: probe: %w", err)
	}
	infos := make([]Info, len(r.servers))
	errs := make([]error, len(r.servers))
	var wg sync.WaitGroup
	for i, s := range r.servers {
		wg.Go(func() {
			info, err := r.probeServer(ctx, s, o.MaxContext)
			if err == nil {
				err = r.probeGenerate(ctx, i, req)
			}
			info.Name = s.Name
			if err != nil {
				err = fmt.Errorf("%s (%s, %s): %w", s.Name, s.Dialect, s.URL, err)
				if errors.Is(err, errUnreachable) {
					info.Unreachable, err = err, nil
				}
			}
			infos[i], errs[i] = info, err
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return infos, ctx.Err()
	}
	if err := errors.Join(errs...); err != nil {
		return infos, fmt.Errorf("remote: probing the inference servers: %w", err)
	}
	var down []error
	r.mu.Lock()
	for i, info := range infos {
		if info.Unreachable != nil {
			s := r.servers[i]
			s.healthy, s.fails = false, max(s.fails, r.opts.EjectAfter)
			down = append(down, info.Unreachable)
		}
	}
	r.mu.Unlock()
	if len(down) == len(infos) {
		return infos, fmt.Errorf("remote: no inference server answered: %w", errors.Join(down...))
	}
	return infos, nil
}

// errUnreachable marks a probe that got no answer from a server, as opposed to a wrong one.
var errUnreachable = errors.New("no answer")

// unreachable says whether err is the server's silence (transport, deadline, 5xx, 429) rather
// than an answer that breaks the contract.
func unreachable(err error) bool {
	var refused *requestError
	var status *statusError
	switch {
	case errors.Is(err, errProtocol), errors.As(err, &refused):
		return false
	case errors.As(err, &status):
		return status.code >= 500 || status.code == http.StatusTooManyRequests || status.code == http.StatusRequestTimeout
	}
	return true
}

// probeGenerate sends req to server i alone, outside the router's accounting.
func (r *Router) probeGenerate(ctx context.Context, i int, req infer.Request) error {
	r.mu.Lock()
	s := r.servers[i]
	s.outstanding++ // call's done1 takes it back
	fails, healthy, failures := s.fails, s.healthy, s.failures
	r.mu.Unlock()
	_, err := r.call(ctx, i, req)
	r.mu.Lock()
	s.fails, s.healthy, s.failures = fails, healthy, failures
	r.mu.Unlock()
	if err != nil {
		if unreachable(err) {
			return fmt.Errorf("generating one token: %w (%w)", errUnreachable, err)
		}
		return fmt.Errorf("generating one token: %w", err)
	}
	return nil
}

// probeServer asks s what it serves, by its dialect.
func (r *Router) probeServer(ctx context.Context, s *server, maxContext int) (Info, error) {
	var info Info
	switch s.Dialect {
	case Agentrl, VLLM:
		var models struct {
			Data []struct {
				ID          string `json:"id"`
				MaxModelLen int    `json:"max_model_len"`
			} `json:"data"`
		}
		if err := r.getJSON(ctx, s, "/v1/models", &models); err != nil {
			return info, err
		}
		var ids []string
		for _, m := range models.Data {
			ids = append(ids, m.ID)
			if s.Dialect == Agentrl || m.ID == s.Model {
				info.Model, info.MaxContext = m.ID, m.MaxModelLen
				break
			}
		}
		if info.Model == "" {
			if s.Dialect == VLLM {
				return info, fmt.Errorf("it serves %q, not the configured model %q (its --served-model-name)", ids, s.Model)
			}
			return info, errors.New("GET /v1/models lists no model")
		}
		if s.Dialect == VLLM {
			var v struct {
				Version string `json:"version"`
			}
			err := r.getJSON(ctx, s, "/version", &v)
			var status *statusError
			switch {
			case errors.As(err, &status) && status.code == http.StatusNotFound:
				// Not every deployment exposes /version; the generation probe still checks the shape.
			case err != nil:
				return info, err
			default:
				info.Release = v.Version
			}
		}
	case SGLang:
		var m struct {
			ModelPath    string `json:"model_path"`
			IsGeneration *bool  `json:"is_generation"`
		}
		if err := r.getJSON(ctx, s, "/get_model_info", &m); err != nil {
			return info, err
		}
		if m.IsGeneration != nil && !*m.IsGeneration {
			return info, fmt.Errorf("it serves %q, which is not a generation model (is_generation false)", m.ModelPath)
		}
		info.Model = m.ModelPath
		var si struct {
			Version       string `json:"version"`
			ContextLength int    `json:"context_length"`
		}
		err := r.getJSON(ctx, s, "/get_server_info", &si)
		var status *statusError
		switch {
		case errors.As(err, &status) && status.code == http.StatusNotFound:
		case err != nil:
			return info, err
		default:
			info.Release, info.MaxContext = si.Version, si.ContextLength
		}
	}
	if floor, ok := minRelease[s.Dialect]; ok && info.Release != "" {
		v, ok := parseRelease(info.Release)
		if ok && less(v, floor) {
			return info, fmt.Errorf("release %s is older than %d.%d.%d, the first this dialect works with", info.Release, floor[0], floor[1], floor[2])
		}
	}
	if maxContext > 0 && info.MaxContext > 0 && info.MaxContext < maxContext {
		return info, fmt.Errorf("it takes sequences of at most %d tokens; the run generates up to %d (rollout.max_context)", info.MaxContext, maxContext)
	}
	return info, nil
}

// statusError is a probe's non-200 answer.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.msg) }

// getJSON GETs path on s under the call deadline and decodes the JSON answer into v.
func (r *Router) getJSON(ctx context.Context, s *server, path string, v any) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(cctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return err
	}
	if s.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(hr)
	if err != nil {
		return fmt.Errorf("GET %s: %w (%w)", path, errUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w (%w)", path, errUnreachable, err)
	}
	if resp.StatusCode != http.StatusOK {
		st := &statusError{code: resp.StatusCode, msg: errorMessage(data)}
		if unreachable(st) {
			return fmt.Errorf("GET %s: %w (%w)", path, errUnreachable, st)
		}
		return fmt.Errorf("GET %s: %w", path, st)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("GET %s: %w: %v", path, errProtocol, err)
	}
	return nil
}

// parseRelease reads "MAJOR.MINOR.PATCH" with anything after the numbers ignored
// ("0.11.0rc1", "0.5.4.post2", "0.10.2+cu128").
func parseRelease(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(strings.TrimPrefix(s, "v"), ".", 4)
	if len(parts) < 2 {
		return v, false
	}
	for i := 0; i < 3 && i < len(parts); i++ {
		p := parts[i]
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		if end == 0 {
			return v, false
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			return v, false
		}
		v[i] = n
		if end < len(p) {
			break
		}
	}
	return v, true
}

// less reports a < b in release order.
func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
