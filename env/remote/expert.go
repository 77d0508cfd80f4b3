package remote

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
)

// CodeNoExpert answers POST /expert on a server whose environment has no expert.
const CodeNoExpert = "no_expert"

// MaxExpertObservations bounds the observations one POST /expert replays.
const MaxExpertObservations = 1024

// handleExpert plays a fresh expert for the request's seed, noise and rng_seed through the
// observations so far and answers its next action.
func (s *Server) handleExpert(w http.ResponseWriter, r *http.Request) error {
	if s.spec.Expert == nil {
		return errorf(http.StatusNotFound, CodeNoExpert, "environment %s has no expert", s.spec.Name)
	}
	var req expertRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.Seed == nil:
		return errorf(http.StatusBadRequest, CodeBadRequest, `expert needs "seed"`)
	case len(req.Observations) == 0 || len(req.Observations) > MaxExpertObservations:
		return errorf(http.StatusBadRequest, CodeBadRequest, "expert needs 1 to %d observations, got %d", MaxExpertObservations, len(req.Observations))
	case !(req.Noise >= 0 && req.Noise <= 1) || math.IsNaN(req.Noise):
		return errorf(http.StatusBadRequest, CodeBadRequest, "expert noise %v must be in [0, 1]", req.Noise)
	}
	ctx, cancel := s.envCtx(r)
	defer cancel()
	agent := s.spec.Expert(*req.Seed, req.Noise, rand.New(rand.NewPCG(req.RNGSeed, 0)))
	var action string
	for i, o := range req.Observations {
		a, err := agent.Act(ctx, string(o))
		if err != nil {
			status, code := envErrorStatus(err)
			return errorf(status, code, "expert, seed %d observation %d: %v", *req.Seed, i, err)
		}
		action = a
	}
	t := text(action)
	writeJSON(w, http.StatusOK, expertResponse{Action: &t})
	return nil
}

// expertAgent is a remote environment's expert as an env.Agent: it keeps the episode's
// observations and asks a replica for each action.
type expertAgent struct {
	p            *Pool
	seed         int64
	noise        float64
	rngSeed      uint64
	observations []text
}

func (a *expertAgent) Act(ctx context.Context, observation string) (string, error) {
	if len(a.observations) >= MaxExpertObservations {
		return "", fmt.Errorf("remote env %s expert: more than %d observations in one episode", a.p.name, MaxExpertObservations)
	}
	a.observations = append(a.observations, text(observation))
	req := expertRequest{Seed: &a.seed, Noise: a.noise, RNGSeed: a.rngSeed, Observations: a.observations}
	var resp expertResponse
	err := a.p.do(ctx, func(c *Client) error {
		return c.call(ctx, "expert", http.MethodPost, "/expert", req, &resp)
	})
	if err != nil {
		return "", err
	}
	if resp.Action == nil {
		err := fmt.Errorf("remote env %s expert: %w: answer without an action", a.p.name, ErrProtocol)
		a.p.count(err)
		return "", err
	}
	return string(*resp.Action), nil
}
