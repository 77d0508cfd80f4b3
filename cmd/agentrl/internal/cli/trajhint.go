package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/traj"
)

// trajSeen collects the phases, environments and statuses of the trajectories read, so that
// filters that match nothing can say what the file holds.
type trajSeen struct {
	phases, envs, statuses map[string]bool
	n                      int
}

func (s *trajSeen) add(t *traj.Trajectory) {
	if s.phases == nil {
		s.phases, s.envs, s.statuses = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	s.n++
	s.phases[orDash(meta(t, "phase"))] = true
	s.envs[t.Env] = true
	s.statuses[t.Status.String()] = true
}

// note writes, when the filters of src matched none of the trajectories read, which filter
// values the file holds.
func (s *trajSeen) note(w io.Writer, src *trajSource, matched int) {
	if matched > 0 || s.n == 0 || src.Phase == "" && src.Env == "" && src.Status == "" {
		return
	}
	list := func(m map[string]bool) string {
		return strings.Join(slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		}), ", ")
	}
	var parts []string
	if src.Phase != "" {
		parts = append(parts, fmt.Sprintf("--phase %q (phases in the file: %s)", src.Phase, list(s.phases)))
	}
	if src.Env != "" {
		parts = append(parts, fmt.Sprintf("--env %q (environments: %s)", src.Env, list(s.envs)))
	}
	if src.Status != "" {
		parts = append(parts, fmt.Sprintf("--status %q (statuses: %s)", src.Status, list(s.statuses)))
	}
	fmt.Fprintf(w, "note: no trajectory of the %d read matches %s\n", s.n, strings.Join(parts, " and "))
}
