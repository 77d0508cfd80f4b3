// Package remote is the learner contract over HTTP (docs/learner.md): Client is a learn.Backend
// whose weights and optimizer live in another process (the reference PyTorch learner,
// learners/torch), and Server serves any learn.Backend on that protocol (tests and the protocol's
// overhead measurement serve the built-in one). Every call has a deadline; a learner that
// restarted is noticed by its epoch, and an optimizer update is applied at most once.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentrl/agentrl/internal/httpserve"
	"github.com/agentrl/agentrl/learn"
)

// EpochHeader carries the learner's epoch on every answer and every request but /v1/info.
const EpochHeader = "Agentrl-Learner-Epoch"

// Options configure a Client.
type Options struct {
	// URL is the learner's base address, http://host:port.
	URL string
	// Key, when set, is sent as "Authorization: Bearer KEY"; required for a non-loopback host.
	Key string
	// Timeout bounds each call (default 5 minutes).
	Timeout time.Duration
	// SamplerDir is where SaveForSampler asks the learner to write version v: SamplerDir/v<v>.
	SamplerDir string
	// HTTP is the client to use (default: a fresh one per Client).
	HTTP *http.Client
}

// DefaultTimeout is a call's deadline when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Minute

// Info is the learner's /v1/info answer.
type Info struct {
	Epoch         uint64          `json:"epoch"`
	Steps         int64           `json:"steps"`
	PendingTokens int64           `json:"pending_tokens"`
	Params        int64           `json:"params"`
	ValueHead     bool            `json:"value_head"`
	Reference     bool            `json:"reference"`
	MaxTokens     int             `json:"max_tokens"`
	Device        string          `json:"device"`
	DType         string          `json:"dtype"`
	Model         json.RawMessage `json:"model"`
}

// ErrRestarted is wrapped by the error of a call that found the learner at another epoch than
// the one the client started with: it restarted, and the gradient it held is lost.
var ErrRestarted = errors.New("learn/remote: the learner restarted")

// ErrSteps is wrapped by the error of an optimizer step refused because the learner's update
// count is not the client's: an update would be applied twice or on an older state.
var ErrSteps = errors.New("learn/remote: the learner's optimizer is at another step")

// Client is a learn.Backend over HTTP. It is used by one goroutine.
type Client struct {
	opts  Options
	base  string
	hc    *http.Client
	info  Info
	epoch uint64
	steps int64
	buf   []byte
	// Sent and Received count the bytes of request and answer bodies.
	Sent, Received int64
}

// Dial checks the options, asks the learner for its info and returns a client bound to its
// epoch.
func Dial(ctx context.Context, o Options) (*Client, error) {
	u, err := url.Parse(o.URL)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("learn/remote: learner url %q must be http://host:port", o.URL)
	}
	if !httpserve.Loopback(u.Hostname()) && o.Key == "" {
		return nil, fmt.Errorf("learn/remote: learner %s is not on loopback: a key is required (learner.key)", u.Host)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("learn/remote: timeout must not be negative, got %v", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	c := &Client{opts: o, base: "http://" + u.Host, hc: o.HTTP}
	if c.hc == nil {
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 2,
		}}
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Epoch == 0 {
		return nil, fmt.Errorf("%w: learner %s reports epoch 0", learn.ErrLearner, c.base)
	}
	c.info, c.epoch, c.steps = info, info.Epoch, info.Steps
	return c, nil
}

// Info asks the learner for its state (no epoch check).
func (c *Client) Info(ctx context.Context) (Info, error) {
	body, err := c.call(ctx, http.MethodGet, "/v1/info", "", nil, false)
	if err != nil {
		return Info{}, err
	}
	var info Info
	if err := json.Unmarshal(body, &info); err != nil {
		return Info{}, fmt.Errorf("%w: learner %s: /v1/info: %v", learn.ErrLearner, c.base, err)
	}
	return info, nil
}

// URL is the learner's address.
func (c *Client) URL() string { return c.base }

// Learner returns the info of the learner as the client bound to it.
func (c *Client) Learner() Info { return c.info }

// Epoch is the epoch of the learner the client is bound to.
func (c *Client) Epoch() uint64 { return c.epoch }

// OptimizerSteps is the learner's update count as the client knows it.
func (c *Client) OptimizerSteps() int64 { return c.steps }

// apiError is a learner's error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// maxAnswer bounds an answer body.
const maxAnswer = 1 << 30

// call sends one request with the call deadline and returns the answer body of a 2xx answer.
// bound sends the epoch and checks the answer's.
func (c *Client) call(ctx context.Context, method, path, ctype string, body []byte, bound bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.opts.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Key)
	}
	if bound {
		req.Header.Set(EpochHeader, strconv.FormatUint(c.epoch, 10))
	}
	c.Sent += int64(len(body))
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: learner %s did not answer %s within %v", learn.ErrLearner, c.base, path, c.opts.Timeout)
		}
		return nil, fmt.Errorf("%w: learner %s: %s: %v", learn.ErrLearner, c.base, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: learner %s did not finish its answer to %s within %v", learn.ErrLearner, c.base, path, c.opts.Timeout)
		}
		return nil, fmt.Errorf("%w: learner %s: %s: reading the answer: %v", learn.ErrLearner, c.base, path, err)
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("%w: learner %s: %s: answer over %d bytes", learn.ErrLearner, c.base, path, maxAnswer)
	}
	c.Received += int64(len(data))
	if bound {
		got, err := strconv.ParseUint(resp.Header.Get(EpochHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: learner %s: %s: answer without a valid %s header", learn.ErrLearner, c.base, path, EpochHeader)
		}
		if got != c.epoch {
			return nil, fmt.Errorf("%w: learner %s is at epoch %d, the run bound to %d: the gradient it held is lost; resume the run from its last checkpoint", ErrRestarted, c.base, got, c.epoch)
		}
	}
	if resp.StatusCode/100 != 2 {
		var ae apiError
		if json.Unmarshal(data, &ae) != nil || ae.Error == "" {
			ae.Error = fmt.Sprintf("status %s: %.200q", resp.Status, data)
		}
		msg := fmt.Sprintf("learner %s: %s: %s", c.base, path, ae.Error)
		switch ae.Code {
		case "epoch":
			return nil, fmt.Errorf("%w: %s", ErrRestarted, msg)
		case "steps":
			return nil, fmt.Errorf("%w: %s", ErrSteps, msg)
		case "non_finite":
			return nil, fmt.Errorf("%w: %s", learn.ErrNonFinite, msg)
		case "broken_weights":
			return nil, fmt.Errorf("%w: %s", learn.ErrBrokenWeights, msg)
		case "bad_request", "unauthorized":
			return nil, errors.New("learn/remote: " + msg)
		}
		return nil, fmt.Errorf("%w: %s", learn.ErrLearner, msg)
	}
	return data, nil
}

// postJSON sends v and decodes the answer into out.
func (c *Client) postJSON(ctx context.Context, path string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	data, err := c.call(ctx, http.MethodPost, path, "application/json", body, true)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: learner %s: %s: %v", learn.ErrLearner, c.base, path, err)
	}
	return nil
}

// Forward implements learn.Backend.
func (c *Client) Forward(ctx context.Context, s *learn.Seqs, o learn.ForwardOptions, out *learn.Outputs) error {
	if err := s.Validate(); err != nil {
		return err
	}
	var flags uint32
	ans := uint32(flagDLogprobs)
	if o.Entropies {
		flags |= flagEntropies
		ans |= flagDEntropies
	}
	if o.Values {
		flags |= flagValues
		ans |= flagDValues
	}
	if o.Reference {
		flags |= flagReference
	}
	c.buf = encodeRequest(c.buf, s, kindForward, flags, nil)
	data, err := c.call(ctx, http.MethodPost, "/v1/forward", "application/octet-stream", c.buf, true)
	if err != nil {
		return err
	}
	if err := decodeAnswer(data, len(s.Tokens), ans, out); err != nil {
		return fmt.Errorf("%w: learner %s: /v1/forward: %v", learn.ErrLearner, c.base, err)
	}
	return nil
}

// ForwardBackward implements learn.Backend.
func (c *Client) ForwardBackward(ctx context.Context, s *learn.Seqs, co learn.Coefficients) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if co.DLogprobs == nil || len(co.DLogprobs) != len(s.Tokens) ||
		(co.DEntropies != nil && len(co.DEntropies) != len(s.Tokens)) || (co.DValues != nil && len(co.DValues) != len(s.Tokens)) {
		return fmt.Errorf("learn/remote: coefficients do not match the batch's %d tokens", len(s.Tokens))
	}
	// An all-zero term (no entropy bonus, no critic) is a zero term: it is not sent.
	if allZero(co.DEntropies) {
		co.DEntropies = nil
	}
	if allZero(co.DValues) {
		co.DValues = nil
	}
	flags := uint32(flagDLogprobs)
	if co.DEntropies != nil {
		flags |= flagDEntropies
	}
	if co.DValues != nil {
		flags |= flagDValues
	}
	c.buf = encodeRequest(c.buf, s, kindForwardBackward, flags, &co)
	data, err := c.call(ctx, http.MethodPost, "/v1/forward_backward", "application/octet-stream", c.buf, true)
	if err != nil {
		return err
	}
	var ans struct {
		Tokens int64 `json:"tokens"`
	}
	if err := json.Unmarshal(data, &ans); err != nil {
		return fmt.Errorf("%w: learner %s: /v1/forward_backward: %v", learn.ErrLearner, c.base, err)
	}
	return nil
}

// OptimStep implements learn.Backend. The request names the update count the client expects,
// so an update is applied at most once.
func (c *Client) OptimStep(ctx context.Context, o learn.OptimStep) (learn.Update, error) {
	req := struct {
		Steps    int64   `json:"steps"`
		LR       float32 `json:"lr"`
		GradClip float32 `json:"grad_clip"`
		Step     int     `json:"step"`
	}{c.steps, o.LR, o.GradClip, o.Step}
	var ans struct {
		Steps    int64   `json:"steps"`
		GradNorm float64 `json:"grad_norm"`
		LR       float64 `json:"lr"`
	}
	if err := c.postJSON(ctx, "/v1/optim_step", req, &ans); err != nil {
		return learn.Update{}, err
	}
	if ans.Steps != c.steps+1 {
		return learn.Update{}, fmt.Errorf("%w: learner %s answered an update with count %d after %d", ErrSteps, c.base, ans.Steps, c.steps)
	}
	c.steps = ans.Steps
	return learn.Update{GradNorm: ans.GradNorm, LR: ans.LR}, nil
}

// SaveForSampler implements learn.Backend: the learner writes a checkpoint folder at
// SamplerDir/v<version>.
func (c *Client) SaveForSampler(ctx context.Context, version int32) (learn.Artifact, error) {
	if c.opts.SamplerDir == "" {
		return learn.Artifact{}, errors.New("learn/remote: no folder for the sampler's weights (Options.SamplerDir)")
	}
	dir := filepath.Join(c.opts.SamplerDir, "v"+strconv.Itoa(int(version)))
	var ans struct {
		Dir string `json:"dir"`
	}
	if err := c.postJSON(ctx, "/v1/save_for_sampler", map[string]any{"version": version, "dir": dir}, &ans); err != nil {
		return learn.Artifact{}, err
	}
	return learn.Artifact{Version: version, Dir: dir}, nil
}

// SaveState implements learn.Backend.
func (c *Client) SaveState(ctx context.Context, dir string) error {
	var ans struct {
		Steps int64 `json:"steps"`
	}
	if err := c.postJSON(ctx, "/v1/save_state", map[string]string{"dir": dir}, &ans); err != nil {
		return err
	}
	if ans.Steps != c.steps {
		return fmt.Errorf("%w: learner %s saved its state at update %d, the client is at %d", ErrSteps, c.base, ans.Steps, c.steps)
	}
	return nil
}

// LoadState implements learn.Backend: the learner's update count becomes the state's.
func (c *Client) LoadState(ctx context.Context, dir string) error {
	var ans struct {
		Steps int64 `json:"steps"`
	}
	if err := c.postJSON(ctx, "/v1/load_state", map[string]string{"dir": dir}, &ans); err != nil {
		return err
	}
	c.steps = ans.Steps
	return nil
}

// Recover binds the client to a learner that restarted: it adopts the learner's new epoch, loads
// the state saved at dir and checks that its update count is wantSteps (the count the run's
// checkpoint recorded), so nothing is trained twice or lost.
func (c *Client) Recover(ctx context.Context, dir string, wantSteps int64) error {
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	c.info, c.epoch = info, info.Epoch
	if err := c.LoadState(ctx, dir); err != nil {
		return err
	}
	if c.steps != wantSteps {
		return fmt.Errorf("%w: the state at %s is at update %d, the run at %d", ErrSteps, dir, c.steps, wantSteps)
	}
	return nil
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}
