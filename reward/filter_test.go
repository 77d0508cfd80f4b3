package reward

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

func group(rewards ...float64) []*traj.Trajectory {
	var g []*traj.Trajectory
	for _, r := range rewards {
		st := traj.StatusOK
		if r < 0 { // a negative reward in these tables marks an infra failure
			st = traj.StatusEnvError
		}
		g = append(g, &traj.Trajectory{Reward: r, Status: st})
	}
	return g
}

// script returns a sampler that serves the given rounds in order and then empty rounds.
func script(rounds ...[][]*traj.Trajectory) (Sampler, *[]int) {
	var asked []int
	return func(_ context.Context, n int) ([][]*traj.Trajectory, error) {
		asked = append(asked, n)
		if len(rounds) == 0 {
			return nil, nil
		}
		r := rounds[0]
		rounds = rounds[1:]
		return r, nil
	}, &asked
}

func TestDynamicSampling(t *testing.T) {
	tests := []struct {
		name    string
		d       DynamicSampling
		rounds  [][][]*traj.Trajectory
		kept    int
		asked   []int
		stats   FillStats
		wantErr string
	}{
		{"fills across rounds", DynamicSampling{Groups: 2, MaxRounds: 3},
			[][][]*traj.Trajectory{{group(1, 1), group(1, 0)}, {group(0, 0, 0), group(0, 1), group(1, 0)}},
			2, []int{2, 1}, FillStats{Rounds: 2, Sampled: 5, ZeroVariance: 2, Surplus: 1}, ""},
		{"failed episodes do not count as zero", DynamicSampling{Groups: 1, MaxRounds: 1},
			[][][]*traj.Trajectory{{group(1, -1), group(1, 0, -1)}},
			1, []int{1}, FillStats{Rounds: 1, Sampled: 2, ZeroVariance: 1, FailedEps: 2}, ""},
		{"bound reached is an error", DynamicSampling{Groups: 2, MaxRounds: 2},
			[][][]*traj.Trajectory{{group(1, 1)}, {group(0, 1)}},
			0, []int{2, 2}, FillStats{Rounds: 2, Sampled: 2, ZeroVariance: 1}, "1 of 2 informative groups after 2 rounds"},
		{"bound reached, partial allowed", DynamicSampling{Groups: 2, MaxRounds: 2, AllowPartial: true},
			[][][]*traj.Trajectory{{group(1, 1)}, {group(0, 1)}},
			1, []int{2, 2}, FillStats{Rounds: 2, Sampled: 2, ZeroVariance: 1, Partial: true}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, asked := script(tc.rounds...)
			kept, st, err := tc.d.Fill(context.Background(), s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if len(kept) != tc.kept || st != tc.stats || len(*asked) != len(tc.asked) {
				t.Fatalf("kept %d stats %+v asked %v; want %d %+v %v", len(kept), st, *asked, tc.kept, tc.stats, tc.asked)
			}
			for i := range tc.asked {
				if (*asked)[i] != tc.asked[i] {
					t.Fatalf("asked %v, want %v", *asked, tc.asked)
				}
			}
			for _, g := range kept {
				if !Informative(g) {
					t.Fatal("kept a zero-variance group")
				}
				for _, tr := range g {
					if tr.Status.Failed() {
						t.Fatal("kept a failed episode")
					}
				}
			}
		})
	}
}

func TestDynamicSamplingErrors(t *testing.T) {
	boom := errors.New("rollout worker lost")
	_, _, err := DynamicSampling{Groups: 1, MaxRounds: 3}.Fill(context.Background(), func(context.Context, int) ([][]*traj.Trajectory, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("sampler error %v not wrapped", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, _ := script()
	if _, _, err := (DynamicSampling{Groups: 1, MaxRounds: 3}).Fill(ctx, s); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fill: %v", err)
	}
	if _, _, err := (DynamicSampling{Groups: 0, MaxRounds: 3}).Fill(context.Background(), s); err == nil {
		t.Fatal("zero target accepted")
	}
}
