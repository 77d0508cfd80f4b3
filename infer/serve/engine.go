package serve

import (
	"sync"

	"github.com/agentrl/agentrl/infer/local"
)

// engine is the local engine that generations go to. A weight update normally loads into it
// between two decode steps; a rewind (weights of a newer epoch at a version not above the
// engine's, see handleWeights) replaces it with a fresh engine instead, because the engine
// reuses keys and values cached under an equal version number, which would then belong to other
// weights. The replaced engine finishes the generations it holds and is closed when the last
// one leaves.
type engine struct {
	*local.Engine
	mu      sync.Mutex
	users   int  // generations using it
	retired bool // replaced: no new generation enters; closed when users reaches 0
}

// enter counts a generation in; false means the engine was replaced (load the current one again).
func (e *engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.retired {
		return false
	}
	e.users++
	return true
}

// leave counts a generation out, closing a replaced engine with its last one.
func (e *engine) leave() {
	e.mu.Lock()
	e.users--
	last := e.retired && e.users == 0
	e.mu.Unlock()
	if last {
		e.Close()
	}
}

// retire stops new generations from entering and closes the engine once none is left.
func (e *engine) retire() {
	e.mu.Lock()
	e.retired = true
	idle := e.users == 0
	e.mu.Unlock()
	if idle {
		e.Close()
	}
}

// done reports whether the engine was replaced and its last generation has left (it is closed).
func (e *engine) done() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retired && e.users == 0
}

// acquire returns the engine a new generation goes to, counted in; the caller calls leave.
func (s *Server) acquire() *engine {
	for {
		if e := s.eng.Load(); e.enter() {
			return e
		}
	}
}
