package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/traj"
)

// buffers are one episode's working columns. The per-token slices grow here while the episode
// runs and are copied into slices of the episode's length when it ends; the buffers then go back
// to bufPool for the next episode. So a finished trajectory owns its slices and holds no room
// for a longer episode, and a running one allocates nothing as it grows once the pool is warm.
// (Sizing a trajectory up front would have to assume the longest episode: 14 bytes a token of
// max_context, nearly all of it unused by short episodes, and all of it work for the collector.)
//
// tokens is lent to the generator as Request.Prompt and stop as Request.Stop: a generator must
// not keep them after Generate returns. Buffers whose last Generate call failed are not
// recycled, so a generator abandoned mid-call (a closed engine) can never read another
// episode's tokens.
type buffers struct {
	tokens   []int32
	roles    []traj.Role
	mask     []bool
	logprobs []float32
	versions []int32
	turns    []traj.Turn
	stop     []int32
}

var bufPool = sync.Pool{New: func() any { return new(buffers) }}

// reset empties b for a new episode, keeping its capacity.
func (b *buffers) reset() {
	b.tokens, b.roles, b.mask = b.tokens[:0], b.roles[:0], b.mask[:0]
	b.logprobs, b.versions = b.logprobs[:0], b.versions[:0]
	clear(b.turns) // drop the previous episode's tool calls
	b.turns = b.turns[:0]
	b.stop = b.stop[:0]
}

// episode accumulates one trajectory.
type episode struct {
	r    *Runner
	t    *traj.Trajectory
	b    *buffers
	conv Conversation
	// sampleStart is the first token of the current training sample; samples lists the starts
	// of the samples after the first (traj.Trajectory.Samples).
	sampleStart int
	samples     []int
	ctx         context.Context // the caller's
	ectx        context.Context // ctx bounded by the episode timeout
	// lent is set while the generator holds b's slices; after a failed call they are not
	// recycled.
	lent  bool
	start time.Time
	mark  time.Time // end of the last timed stage
}

// lap adds the time since the last stage ended to *d. Stages are timed back to back, one clock
// reading each, so the loop's own bookkeeping between two stages (well under a microsecond) is
// counted in the stage that follows it.
func (ep *episode) lap(d *time.Duration) {
	now := ep.r.now()
	*d += now.Sub(ep.mark)
	ep.mark = now
}

// extend lengthens every per-token column by n and returns the old length. The columns grow
// together, geometrically, in this one place.
func (ep *episode) extend(n int) int {
	b := ep.b
	at := len(b.tokens)
	b.tokens = slices.Grow(b.tokens, n)[:at+n]
	b.roles = slices.Grow(b.roles, n)[:at+n]
	b.mask = slices.Grow(b.mask, n)[:at+n]
	b.logprobs = slices.Grow(b.logprobs, n)[:at+n]
	b.versions = slices.Grow(b.versions, n)[:at+n]
	return at
}

func (ep *episode) append(toks []int32, role traj.Role) {
	at := ep.extend(len(toks))
	b := ep.b
	copy(b.tokens[at:], toks)
	clear(b.mask[at:])
	clear(b.logprobs[at:])
	roles, versions := b.roles[at:], b.versions[at:]
	for i := range roles {
		roles[i] = role
	}
	for i := range versions {
		versions[i] = traj.NoVersion
	}
}

func (ep *episode) appendCompletion(c infer.Completion) {
	at := ep.extend(len(c.Tokens))
	b := ep.b
	copy(b.tokens[at:], c.Tokens)
	copy(b.logprobs[at:], c.Logprobs)
	copy(b.versions[at:], c.Versions)
	roles, mask := b.roles[at:], b.mask[at:]
	for i := range roles {
		roles[i] = traj.RoleAssistant
	}
	for i := range mask {
		mask[i] = true
	}
}

// addTurn records a finished turn.
func (ep *episode) addTurn(tu traj.Turn) { ep.b.turns = append(ep.b.turns, tu) }

// len is the number of tokens so far.
func (ep *episode) len() int { return len(ep.b.tokens) }

// sampleLen is the number of tokens of the current sample: the context the policy is given.
func (ep *episode) sampleLen() int { return len(ep.b.tokens) - ep.sampleStart }

// split closes the current sample and opens a new one with ctx, the complete context the
// template rendered. Its tokens were not sampled in this context, so none is in the loss. Each
// token takes the role it had at the same position of the previous sample as far as the two
// agree; from where the render first differs, the tokens are context the policy did not write
// in this form, attributed to the speaker of the observation that caused the render (role).
func (ep *episode) split(ctx []int32, role traj.Role) {
	prev := ep.sampleStart
	common := 0
	for common < len(ctx) && prev+common < ep.len() && ctx[common] == ep.b.tokens[prev+common] {
		common++
	}
	ep.sampleStart = ep.len()
	ep.samples = append(ep.samples, ep.sampleStart)
	ep.append(ctx, role)
	b := ep.b
	copy(b.roles[ep.sampleStart:ep.sampleStart+common], b.roles[prev:prev+common])
}

func (ep *episode) end(status traj.Status, msg string) {
	ep.t.Status = status
	ep.t.Error = msg
}

// fail records an infrastructure failure; it returns an error, ending the episode's caller too,
// when the caller's ctx ended or when the generator reported a broken policy (infer.ErrNonFinite:
// a failure of the policy, which every other episode would meet, not of this environment).
func (ep *episode) fail(stage string, err error) error {
	if ep.ctx.Err() != nil {
		ep.end(traj.StatusEnvError, "cancelled")
		return ep.ctx.Err()
	}
	if errors.Is(err, infer.ErrNonFinite) {
		ep.end(traj.StatusEnvError, fmt.Sprintf("%s: %v", stage, err))
		return fmt.Errorf("rollout: episode %s: %s: %w", ep.t.ID, stage, err)
	}
	if ep.ectx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		ep.end(traj.StatusTimeout, fmt.Sprintf("%s: %v", stage, err))
		return nil
	}
	ep.end(traj.StatusEnvError, fmt.Sprintf("%s: %v", stage, err))
	return nil
}

// finish moves the columns into the trajectory, records the total time and recycles the
// buffers. It runs on every return from Episode, so a partial trajectory is complete too.
func (ep *episode) finish() {
	t, b := ep.t, ep.b
	if n := len(b.tokens); n > 0 {
		t.Tokens = slices.Clone(b.tokens)
		t.Roles = slices.Clone(b.roles)
		t.LossMask = slices.Clone(b.mask)
		t.Logprobs = slices.Clone(b.logprobs)
		t.Versions = slices.Clone(b.versions)
	}
	if len(b.turns) > 0 {
		t.Turns = slices.Clone(b.turns)
	}
	t.Samples = ep.samples
	t.Timings.Total = ep.r.now().Sub(ep.start)
	if !ep.lent {
		b.reset()
		bufPool.Put(b)
	}
	ep.b = nil
}
