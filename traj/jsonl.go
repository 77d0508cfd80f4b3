package traj

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// JSONVersion is the version of the JSON form written by AppendJSON. Readers reject other versions.
//
// The JSON form of a trajectory is one object (one line in a JSONL file):
//
//	{"v":1,"id":…,"env":…,"task_seed":…,"group_id":…,
//	 "tokens":[…],"roles":"suuaaat…","loss_mask":"0011…","logprobs":[…],"versions":[…],
//	 "turns":[{"start":…,"end":…,"obs_end":…,"reward":…,"tool_calls":[{"name","arguments","result","error"}]}],
//	 "samples":[…],"reward":…,"status":"ok","error":…,"timings":{"generate_ns","env_ns","tokenize_ns","total_ns"},
//	 "meta":[{"k":…,"v":…}]}
//
// Roles are one letter per token (s system, u user, a assistant, t tool, e env) and the loss mask
// one digit per token, so a 4096-token line stays readable and small. Floats follow the rules in
// floattext.go (non-finite values as strings, exact bits always); strings that are not UTF-8 are
// written as {"b64":…}. Unknown fields, a missing or unknown "v", and any structural violation
// (see Trajectory.Validate) are errors. "samples" (where each training sample after the first
// begins) is written only for an episode of several samples: a one-sample episode's line is what
// earlier builds wrote. Integers above 2^53 (seeds, group ids) are exact here but
// lose precision in readers that parse every number as a double.
const JSONVersion = 1

const roleLetters = "suate" // indexed by Role

// AppendJSON appends the JSON form of t (no trailing newline) to dst.
// It fails if t does not pass Validate.
func (t *Trajectory) AppendJSON(dst []byte) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return dst, fmt.Errorf("traj: encode json: %w", err)
	}
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, JSONVersion, 10)
	dst = append(dst, `,"id":`...)
	dst = appendStringJSON(dst, t.ID)
	dst = append(dst, `,"env":`...)
	dst = appendStringJSON(dst, t.Env)
	dst = append(dst, `,"task_seed":`...)
	dst = strconv.AppendInt(dst, t.TaskSeed, 10)
	dst = append(dst, `,"group_id":`...)
	dst = strconv.AppendUint(dst, t.GroupID, 10)
	dst = append(dst, `,"tokens":[`...)
	for i, tok := range t.Tokens {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(tok), 10)
	}
	dst = append(dst, `],"roles":"`...)
	for _, r := range t.Roles {
		dst = append(dst, roleLetters[r])
	}
	dst = append(dst, `","loss_mask":"`...)
	for _, m := range t.LossMask {
		if m {
			dst = append(dst, '1')
		} else {
			dst = append(dst, '0')
		}
	}
	dst = append(dst, `","logprobs":[`...)
	for i, lp := range t.Logprobs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendFloat32JSON(dst, lp)
	}
	dst = append(dst, `],"versions":[`...)
	for i, v := range t.Versions {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(v), 10)
	}
	dst = append(dst, `],"turns":[`...)
	for i := range t.Turns {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendTurnJSON(dst, &t.Turns[i])
	}
	dst = append(dst, ']')
	if len(t.Samples) > 0 {
		dst = append(dst, `,"samples":[`...)
		for i, s := range t.Samples {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(s), 10)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"reward":`...)
	dst = appendFloat64JSON(dst, t.Reward)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, t.Status.String()...)
	dst = append(dst, `","error":`...)
	dst = appendStringJSON(dst, t.Error)
	dst = append(dst, `,"timings":{"generate_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Timings.Generate), 10)
	dst = append(dst, `,"env_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Timings.Env), 10)
	dst = append(dst, `,"tokenize_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Timings.Tokenize), 10)
	dst = append(dst, `,"total_ns":`...)
	dst = strconv.AppendInt(dst, int64(t.Timings.Total), 10)
	dst = append(dst, '}')
	if len(t.Meta) > 0 {
		dst = append(dst, `,"meta":[`...)
		for i, kv := range t.Meta {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"k":`...)
			dst = appendStringJSON(dst, kv.Key)
			dst = append(dst, `,"v":`...)
			dst = appendStringJSON(dst, kv.Value)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

func appendTurnJSON(dst []byte, tu *Turn) []byte {
	dst = append(dst, `{"start":`...)
	dst = strconv.AppendInt(dst, int64(tu.Start), 10)
	dst = append(dst, `,"end":`...)
	dst = strconv.AppendInt(dst, int64(tu.End), 10)
	dst = append(dst, `,"obs_end":`...)
	dst = strconv.AppendInt(dst, int64(tu.ObsEnd), 10)
	dst = append(dst, `,"reward":`...)
	dst = appendFloat64JSON(dst, tu.Reward)
	if len(tu.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, c := range tu.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"name":`...)
			dst = appendStringJSON(dst, c.Name)
			dst = append(dst, `,"arguments":`...)
			dst = appendStringJSON(dst, c.Arguments)
			if c.Result != "" {
				dst = append(dst, `,"result":`...)
				dst = appendStringJSON(dst, c.Result)
			}
			if c.Error != "" {
				dst = append(dst, `,"error":`...)
				dst = appendStringJSON(dst, c.Error)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// MarshalJSON writes the JSON form described at JSONVersion, so encoding/json users (queues,
// APIs) get the same exact, NaN-safe encoding as JSONL files.
func (t Trajectory) MarshalJSON() ([]byte, error) { return t.AppendJSON(nil) }

// The wire structs mirror the JSON form; they exist so that encoding/json rejects unknown fields.
type jsonTrajectory struct {
	V        *int         `json:"v"`
	ID       stringJSON   `json:"id"`
	Env      stringJSON   `json:"env"`
	TaskSeed int64        `json:"task_seed"`
	GroupID  uint64       `json:"group_id"`
	Tokens   int32sJSON   `json:"tokens"`
	Roles    string       `json:"roles"`
	LossMask string       `json:"loss_mask"`
	Logprobs float32sJSON `json:"logprobs"`
	Versions int32sJSON   `json:"versions"`
	Turns    []jsonTurn   `json:"turns"`
	Samples  []int        `json:"samples"`
	Reward   float64JSON  `json:"reward"`
	Status   string       `json:"status"`
	Error    stringJSON   `json:"error"`
	Timings  struct {
		Generate int64 `json:"generate_ns"`
		Env      int64 `json:"env_ns"`
		Tokenize int64 `json:"tokenize_ns"`
		Total    int64 `json:"total_ns"`
	} `json:"timings"`
	Meta []struct {
		K stringJSON `json:"k"`
		V stringJSON `json:"v"`
	} `json:"meta"`
}

type jsonTurn struct {
	Start     int         `json:"start"`
	End       int         `json:"end"`
	ObsEnd    int         `json:"obs_end"`
	Reward    float64JSON `json:"reward"`
	ToolCalls []struct {
		Name      stringJSON `json:"name"`
		Arguments stringJSON `json:"arguments"`
		Result    stringJSON `json:"result"`
		Error     stringJSON `json:"error"`
	} `json:"tool_calls"`
}

// UnmarshalJSON parses the JSON form written by AppendJSON, replacing all of *t. Unknown fields,
// an unknown version, trailing data and structurally invalid trajectories are errors.
func (t *Trajectory) UnmarshalJSON(data []byte) error {
	var w jsonTrajectory
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("traj: decode json: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("traj: decode json: trailing data after the object")
	}
	if w.V == nil {
		return errors.New(`traj: decode json: missing "v" (format version)`)
	}
	if *w.V != JSONVersion {
		return fmt.Errorf("traj: decode json: unknown format version %d (this build reads %d)", *w.V, JSONVersion)
	}
	out, err := w.trajectory()
	if err != nil {
		return fmt.Errorf("traj: decode json: %w", err)
	}
	*t = out
	return nil
}

func (w *jsonTrajectory) trajectory() (Trajectory, error) {
	n := len(w.Tokens)
	t := Trajectory{
		ID: string(w.ID), Env: string(w.Env), TaskSeed: w.TaskSeed, GroupID: w.GroupID,
		Reward: float64(w.Reward), Error: string(w.Error),
	}
	if len(w.Roles) != n || len(w.LossMask) != n || len(w.Logprobs) != n || len(w.Versions) != n {
		return t, fmt.Errorf("per-token lengths differ: tokens %d roles %d loss_mask %d logprobs %d versions %d",
			n, len(w.Roles), len(w.LossMask), len(w.Logprobs), len(w.Versions))
	}
	if n > 0 {
		t.Tokens = []int32(w.Tokens)
		t.Logprobs = []float32(w.Logprobs)
		t.Versions = []int32(w.Versions)
		t.Roles = make([]Role, n)
		t.LossMask = make([]bool, n)
		for i := 0; i < n; i++ {
			r := bytes.IndexByte([]byte(roleLetters), w.Roles[i])
			if r < 0 {
				return t, fmt.Errorf("token %d: unknown role letter %q", i, w.Roles[i])
			}
			t.Roles[i] = Role(r)
			switch w.LossMask[i] {
			case '0':
			case '1':
				t.LossMask[i] = true
			default:
				return t, fmt.Errorf("token %d: loss mask %q is not 0 or 1", i, w.LossMask[i])
			}
		}
	}
	st, err := ParseStatus(w.Status)
	if err != nil {
		return t, err
	}
	t.Status = st
	t.Timings = Timings{
		Generate: time.Duration(w.Timings.Generate), Env: time.Duration(w.Timings.Env),
		Tokenize: time.Duration(w.Timings.Tokenize), Total: time.Duration(w.Timings.Total),
	}
	if len(w.Turns) > 0 {
		t.Turns = make([]Turn, len(w.Turns))
		for i, jt := range w.Turns {
			tu := Turn{Start: jt.Start, End: jt.End, ObsEnd: jt.ObsEnd, Reward: float64(jt.Reward)}
			if len(jt.ToolCalls) > 0 {
				tu.ToolCalls = make([]ToolCall, len(jt.ToolCalls))
				for j, c := range jt.ToolCalls {
					tu.ToolCalls[j] = ToolCall{Name: string(c.Name), Arguments: string(c.Arguments),
						Result: string(c.Result), Error: string(c.Error)}
				}
			}
			t.Turns[i] = tu
		}
	}
	if w.Samples != nil {
		if len(w.Samples) == 0 {
			return t, errors.New(`"samples" is empty: an episode of one sample omits it`)
		}
		t.Samples = w.Samples
	}
	if len(w.Meta) > 0 {
		t.Meta = make([]KV, len(w.Meta))
		for i, kv := range w.Meta {
			t.Meta[i] = KV{Key: string(kv.K), Value: string(kv.V)}
		}
	}
	if err := t.Validate(); err != nil {
		return t, err
	}
	return t, nil
}
