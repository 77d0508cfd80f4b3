package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/pipeline"
)

// distillBench is on-policy distillation on calc (issue 28): from the same supervised student,
// RL alone against distillation from an RL-trained teacher (the preset's RL phase run once from
// that student for twice the arms' steps, seed 1000), alone (a distill phase, the Tinker
// cookbook's on-policy distillation) and beside the environment's reward. Dynamic sampling is
// off in the distillation arms: it keeps groups by the spread of the environment's reward, which
// a distill phase does not train on and which, beside a teacher, would drop the groups whose
// rewards agree, where the teacher's signal is as dense as anywhere.
var distillBench = paperBench{
	what:    "on-policy distillation from an RL-trained teacher vs RL alone, from one supervised student",
	presets: []string{"calc"},
	arms: []paperArm{
		{name: "rl"},
		{name: "distill", sets: []string{"phases.rl.kind=distill", noDynSampled}, after: []string{"phases.rl.envs.0.reward=null"},
			distill: `phases.rl.rl.distill={teacher: 'checkpoint:%s', mode: advantage, coef: 1}`},
		{name: "rl+distill", sets: []string{noDynSampled}, distill: `phases.rl.rl.distill={teacher: 'checkpoint:%s', mode: advantage, coef: 0.5}`},
	},
	claims: []paperClaim{
		{"distill", "rl", "at-eps", "Agarwal et al. (arXiv 2306.13649), Tinker's on-policy distillation: a teacher's dense per-token signal learns more per episode than an outcome reward"},
		{"distill", "rl", "at-wall", "Tinker's on-policy distillation: the teacher's level at a fraction of RL's compute"},
	},
	figures: []string{"at-eps", "at-wall", "greedy", "wall"},
}

// distillSet is the arm's teacher setting for the checkpoint teacher; before the teacher is
// trained (validation of the whole preset), its supervised phase stands in for it.
func distillSet(a paperArm, teacher string) string {
	s := fmt.Sprintf(a.distill, teacher)
	if teacher == "" {
		s = strings.Replace(s, "'checkpoint:'", "'phase:sft'", 1)
	}
	return s
}

// teacher is the RL-trained teacher of arm a on preset ("" when the arm has none): o.Teacher when
// given, else the preset's RL phase run once from o.TeacherInit (default: the student's supervised
// checkpoint init), seed 1000, for o.TeacherSteps (default 2×steps), its last checkpoint reused by
// every seed and arm. Either way the teacher is evaluated once on the arms' held-out tasks (seed
// 1000) and its pass@1 printed, so the report says how far above the student it stands.
func (pl *paperPlan) teacher(ctx context.Context, w, out io.Writer, o PaperOptions, a paperArm, arm rlArm, preset, init string, steps int) (string, error) {
	if a.distill == "" {
		return "", nil
	}
	if dir, ok := pl.teachers[preset]; ok {
		return dir, nil
	}
	t0 := time.Now()
	dir := o.Teacher
	if dir == "" {
		n := cmp.Or(o.TeacherSteps, 2*steps)
		from := cmp.Or(o.TeacherInit, init)
		sets := []string{"runs_dir=" + o.RunsDir, "name=bench-paper-teacher-" + preset, "seed=1000", "init=" + from,
			fmt.Sprintf("phases.rl.steps=%d", n), fmt.Sprintf("checkpoint.every=%d", n), "eval.tasks=8", "eval.samples=1", "eval.every=0"}
		if c, err := config.Preset(preset); err == nil {
			sets = append(sets, fmt.Sprintf("phases.rl.optim.warmup=%d", min(c.Phases[len(c.Phases)-1].Optim.Warmup, n)))
		}
		cfg, err := config.Load(o.Envs, preset, "", append(sets, o.Set...))
		if err != nil {
			return "", fmt.Errorf("teacher: %w", err)
		}
		cfg.Phases = cfg.Phases[1:]
		run, err := pipeline.NewRun(cfg, pipeline.Options{Out: out, Terminal: o.Terminal, Envs: o.Envs})
		if err != nil {
			return "", fmt.Errorf("teacher: %w", err)
		}
		sum, err := run.Train(ctx)
		if err != nil {
			return "", fmt.Errorf("teacher: %w", err)
		}
		dir = filepath.Join(sum.Dir, "checkpoints", fmt.Sprintf("rl-p0.s%06d", n))
		fmt.Fprintf(w, "RL-trained teacher on %s: %s (%d steps from %s, %s)\n", preset, dir, n, from, time.Since(t0).Round(time.Second))
	}
	p, err := evalCheckpoint(ctx, dir, 1000, arm)
	if err != nil {
		return "", fmt.Errorf("teacher %s: %w", dir, err)
	}
	fmt.Fprintf(w, "teacher on %s: %s, held-out pass@1 %.1f%% ± %.1f (greedy %.1f%%)\n", preset, dir, 100*p.pass1, 100*1.96*p.se, 100*p.greedy)
	if pl.teachers == nil {
		pl.teachers = map[string]string{}
	}
	pl.teachers[preset] = dir
	return dir, nil
}
