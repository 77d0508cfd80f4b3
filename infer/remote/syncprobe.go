package remote

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/agentrl/agentrl/infer"
)

// A weight sync is checked, not trusted: after a server loads a version, and before the router
// sends it that version's requests, it scores a fixed probe sequence through its dialect's
// scoring (agentrl: /agentrl/v1/score, which also names the version it serves; vLLM:
// prompt_logprobs on /v1/completions under the version's adapter name, so an adapter that never
// reached the server is noticed rather than sampled from; SGLang: input_token_logprobs on
// /generate), and its logprobs are compared with the learner's. A difference beyond the tolerance
// of the lower of the two precisions, an agentrl server naming another version, or a scoring the
// server refuses or answers outside its dialect's shape fails the publish with a *SyncProbeError
// naming the server and both numbers: the trainer stops rather than train on episodes of weights
// it did not publish. A server that does not answer the probe is treated as one the update did
// not reach (it gets no requests until a later update, checked in its turn, succeeds there).

// SyncProbe is what every server must reproduce after a publish.
type SyncProbe struct {
	// Tokens is the probe sequence; every token from the second on is scored.
	Tokens []int32
	// Want is the learner's logprob of Tokens[1:] under the version published.
	Want []float32
	// Learner names where Want came from, for messages ("the learner at http://…").
	Learner string
	// Precision is the learner's number format (float32, bfloat16).
	Precision string
	// Tolerance is the largest |Δ logprob| allowed between the learner and a server when the
	// lower of their precisions is precision.
	Tolerance func(precision string) float64
}

// Validate reports a probe that cannot be checked.
func (p *SyncProbe) Validate() error {
	if len(p.Tokens) < 2 || len(p.Want) != len(p.Tokens)-1 {
		return fmt.Errorf("remote: sync probe of %d tokens has %d learner logprobs, want %d", len(p.Tokens), len(p.Want), max(len(p.Tokens)-1, 1))
	}
	if p.Tolerance == nil {
		return errors.New("remote: sync probe has no tolerance")
	}
	return nil
}

// LowerPrecision is the precision a comparison of a and b is judged in: float32 when both are,
// otherwise the one that is not (bfloat16 for two formats below float32 that differ).
func LowerPrecision(a, b string) string {
	switch {
	case a == b:
		return a
	case a == Float32:
		return b
	case b == Float32:
		return a
	}
	return BFloat16
}

// SyncResult is one server's probe after a publish.
type SyncResult struct {
	Server    string
	Precision string  // the lower of the learner's and the server's
	MaxDiff   float64 // max |Δ logprob| over the probe's tokens
	MeanDiff  float64 // mean |Δ logprob|
}

// SyncProbeError is a server that does not serve the version just published to it.
type SyncProbeError struct {
	Server  string
	URL     string
	Dialect Dialect
	Version int32
	Model   string // what the probe asked for (vLLM: the version's adapter name)
	Learner string
	// A mismatch: the learner and the server score probe token Position at Want and Got, |Δ|
	// Diff beyond Tolerance (judged in Precision).
	Position          int
	Got, Want         float32
	Diff, Tolerance   float64
	Precision         string
	Served            int32 // an agentrl server's version, when it names another (else -1)
	Err               error // the scoring failed: refused, or an answer outside the dialect
	Result            SyncResult
	differentVersions bool
}

func (e *SyncProbeError) Error() string {
	where := fmt.Sprintf("weight sync probe after v%d: server %s (%s, %s", e.Version, e.Server, e.Dialect, e.URL)
	if e.Model != "" {
		where += ", model " + e.Model
	}
	where += ")"
	switch {
	case e.Err != nil:
		return fmt.Sprintf("%s could not score the probe sequence: %v; the version may never have reached it", where, e.Err)
	case e.differentVersions:
		return fmt.Sprintf("%s serves version %d", where, e.Served)
	}
	return fmt.Sprintf("%s scores probe token %d at logprob %v, %s at %v: |Δ| %.3g (mean %.3g) beyond the %s tolerance %g; the server does not serve the weights of v%d",
		where, e.Position, e.Got, e.Learner, e.Want, e.Diff, e.Result.MeanDiff, e.Precision, e.Tolerance, e.Version)
}

func (e *SyncProbeError) Unwrap() error { return e.Err }

// checkSync has s, which loaded version, score the probe as srv (s's Server, or a copy naming
// the version's adapter) and compares it with the learner's. The error is a *SyncProbeError but
// for a server that did not answer (transport, deadline, 5xx), which is returned as it is.
func (r *Router) checkSync(ctx context.Context, s *server, srv *Server, version int32, p *SyncProbe) (SyncResult, error) {
	prec := LowerPrecision(p.Precision, s.precision())
	res := SyncResult{Server: s.Name, Precision: prec}
	fail := &SyncProbeError{Server: s.Name, URL: s.URL, Dialect: s.Dialect, Version: version, Learner: p.Learner, Precision: prec, Served: -1}
	if s.Dialect == VLLM {
		fail.Model = srv.Model
	}
	lps, served, err := r.scoreOn(ctx, s, srv, infer.ScoreRequest{Tokens: p.Tokens, Start: 1})
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		var refused *requestError
		if errors.Is(err, errProtocol) || errors.Is(err, infer.ErrBadScores) || errors.As(err, &refused) {
			fail.Err = err
			return res, fail
		}
		return res, fmt.Errorf("scoring the sync probe: %w", err)
	}
	if s.Dialect == Agentrl && served != version {
		fail.Served, fail.differentVersions = served, true
		return res, fail
	}
	var sum float64
	for i, got := range lps {
		d := math.Abs(float64(got) - float64(p.Want[i]))
		sum += d
		if d > res.MaxDiff || i == 0 {
			res.MaxDiff = d
			fail.Position, fail.Got, fail.Want = i+1, got, p.Want[i]
		}
	}
	res.MeanDiff = sum / float64(len(lps))
	fail.Diff, fail.Tolerance, fail.Result = res.MaxDiff, p.Tolerance(prec), res
	if !(res.MaxDiff <= fail.Tolerance) {
		return res, fail
	}
	return res, nil
}
