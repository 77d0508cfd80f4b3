package env

// SubtaskGrader is implemented by environments whose tasks decompose into independent sub-tasks
// that the environment can grade on their own: when the policy delegates a sub-task to a
// sub-agent (rollout's delegate tool) and the run trains sub-episodes with their own reward,
// the sub-agent's answer is graded here. ok is false when subtask is not one the environment
// recognizes (the sub-episode then shares the parent's outcome only). It must be safe to call
// concurrently with itself (sub-episodes of one turn run in parallel) and must not depend on
// the episode's progress.
type SubtaskGrader interface {
	GradeSubtask(subtask, answer string) (reward float64, ok bool)
}

// SubtaskGraderOf returns the SubtaskGrader of e, looking through this package's wrappers
// (tools, turn limit, step timeout, observation cap), or nil when there is none.
func SubtaskGraderOf(e Env) SubtaskGrader {
	for {
		if g, ok := e.(SubtaskGrader); ok {
			return g
		}
		if w, ok := e.(*toolEnv); ok {
			e = w.inner
			continue
		}
		p := innerOf(e)
		if p == nil {
			return nil
		}
		e = *p
	}
}
