package remote

import (
	"encoding/json"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// ProtocolVersion is reported by /metadata; clients refuse servers that speak another one.
const ProtocolVersion = 1

// text is a string that survives JSON exactly, with traj's conventions: valid UTF-8 as a JSON
// string, anything else as {"b64": "…"}.
type text string

func (s text) MarshalJSON() ([]byte, error) { return traj.StringJSON(string(s)), nil }

func (s *text) UnmarshalJSON(b []byte) error {
	v, err := traj.ParseStringJSON(b)
	if err != nil {
		return err
	}
	*s = text(v)
	return nil
}

// number is a float64 that survives JSON exactly, with traj's conventions for non-finite values.
type number float64

func (n number) MarshalJSON() ([]byte, error) { return traj.Float64JSON(float64(n)), nil }

func (n *number) UnmarshalJSON(b []byte) error {
	v, err := traj.ParseFloat64JSON(b)
	if err != nil {
		return err
	}
	*n = number(v)
	return nil
}

type resetRequest struct {
	Seed      *int64 `json:"seed"`
	SessionID string `json:"session_id,omitempty"`
}

type wireObservation struct {
	System text `json:"system"`
	Text   text `json:"text"`
}

type resetResponse struct {
	SessionID   string          `json:"session_id"`
	Observation wireObservation `json:"observation"`
}

type stepRequest struct {
	SessionID string `json:"session_id"`
	Action    *text  `json:"action"`
}

type wireToolCall struct {
	Name      text `json:"name"`
	Arguments text `json:"arguments"`
	Result    text `json:"result,omitempty"`
	Error     text `json:"error,omitempty"`
}

type stepResponse struct {
	SessionID   string          `json:"session_id"`
	Observation text            `json:"observation"`
	Role        string          `json:"role"`
	Reward      number          `json:"reward"`
	Done        bool            `json:"done"`
	ToolCalls   []wireToolCall  `json:"tool_calls,omitempty"`
	Info        map[string]text `json:"info,omitempty"`
}

type closeRequest struct {
	SessionID string `json:"session_id"`
}

// State is a session as GET /state reports it.
type State struct {
	SessionID string `json:"session_id"`
	Seed      int64  `json:"seed"`
	StepCount int    `json:"step_count"`
	Done      bool   `json:"done"`
	// Failed is set once the environment returned an error other than misuse (step after done).
	Failed bool  `json:"failed"`
	IdleMS int64 `json:"idle_ms"`
}

// Range is a half-open seed range on the wire.
type Range struct {
	Lo int64 `json:"lo"`
	Hi int64 `json:"hi"`
}

// Metadata is what GET /metadata reports.
type Metadata struct {
	Protocol      int    `json:"protocol"`
	Name          string `json:"name"`
	Description   string `json:"description"`
	Train         Range  `json:"train"`
	Heldout       Range  `json:"heldout"`
	MaxBodyBytes  int64  `json:"max_body_bytes"`
	MaxSessions   int    `json:"max_sessions"`
	IdleTimeoutMS int64  `json:"idle_timeout_ms"`
	// Expert says the server answers POST /expert with a demonstrating policy's actions.
	Expert bool `json:"expert,omitempty"`
	// Tools lists the tools the environment's episodes offer, as their system prompt describes
	// them; a transition naming a tool that is not listed is a protocol error when the list is
	// not empty.
	Tools []ToolInfo `json:"tools,omitempty"`
}

// ToolInfo is one tool of Metadata.Tools.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // a JSON Schema of the arguments
}

// expertRequest asks for the expert's next action in the episode of seed whose observations so
// far (the reset's text first) are Observations: the server plays a fresh expert for seed,
// noise and rng_seed through them, so the route keeps no state.
type expertRequest struct {
	Seed         *int64  `json:"seed"`
	Noise        float64 `json:"noise"`
	RNGSeed      uint64  `json:"rng_seed"`
	Observations []text  `json:"observations"`
}

type expertResponse struct {
	Action *text `json:"action"`
}

type health struct {
	Status   string `json:"status"`
	Env      string `json:"env"`
	Sessions int    `json:"sessions"`
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func transitionToWire(id string, tr env.Transition) stepResponse {
	out := stepResponse{SessionID: id, Observation: text(tr.Observation), Role: tr.Role.String(),
		Reward: number(tr.Reward), Done: tr.Done}
	for _, c := range tr.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, wireToolCall{Name: text(c.Name), Arguments: text(c.Arguments),
			Result: text(c.Result), Error: text(c.Error)})
	}
	if len(tr.Info) > 0 {
		out.Info = make(map[string]text, len(tr.Info))
		for k, v := range tr.Info {
			out.Info[k] = text(v)
		}
	}
	return out
}
