package pipeline

import (
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a phase's advance: a bar with step, status and ETA on a terminal, and plain log
// lines otherwise (a bar's carriage returns would garble a log file).
type progress struct {
	r     *Run
	name  string
	unit  string // what is counted: "step", "episode"
	total int
	from  int // the step it started at (a resumed phase's); the ETA's rate counts only what it did
	bar   *progressbar.ProgressBar
	start time.Time
	last  time.Time
}

func (r *Run) newProgress(name string, total int) *progress {
	return r.newCounter(name, "step", total)
}

// newProgressFrom is newProgress for a phase resumed after step from.
func (r *Run) newProgressFrom(name string, total, from int) *progress {
	p := r.newCounter(name, "step", total)
	p.from = from
	if p.bar != nil && from > 0 {
		p.bar.ChangeMax(total - from) // the bar counts this segment's steps, so its ETA holds
	}
	return p
}

// newCounter is newProgress counting unit (e.g. episodes) instead of steps; update may be
// called from several goroutines.
func (r *Run) newCounter(name, unit string, total int) *progress {
	p := &progress{r: r, name: name, unit: unit, total: total, start: r.now()}
	if unit != "step" {
		p.last = p.start // plain lines only for work that lasts: the first after 5 s
	}
	if r.opts.Terminal && r.opts.Out != nil {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(r.opts.Out),
			progressbar.OptionSetDescription(name),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(24),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func (p *progress) update(step int, status string) {
	if p.bar != nil {
		if p.from > 0 { // the bar counts the segment: say where the phase is
			status = fmt.Sprintf("%s (step %d/%d)", status, step, p.total)
		}
		p.bar.Describe(fmt.Sprintf("%s %s", p.name, status))
		p.bar.Set(step - p.from)
		return
	}
	now := p.r.now()
	// Plain lines: every step while steps are slow, at most one every 5 s otherwise (and for
	// counters of episodes, none in the first 5 s).
	if (p.unit == "step" && (step == p.total || step == p.from+1)) || now.Sub(p.last) >= 5*time.Second {
		p.last = now
		el := now.Sub(p.start)
		eta := time.Duration(float64(el) / float64(max(step-p.from, 1)) * float64(p.total-step))
		if status != "" {
			status = "  " + status
		}
		p.r.printf("%s %s %d/%d%s  (%s, eta %s)\n", p.name, p.unit, step, p.total, status, el.Round(time.Second), eta.Round(time.Second))
	}
}

func (p *progress) warn(msg string) {
	if p.bar != nil {
		p.bar.Clear()
	}
	p.r.printf("warning: %s step: %s\n", p.name, msg)
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
		p.r.printf("%s: %d %ss in %s\n", p.name, p.total, p.unit, p.r.now().Sub(p.start).Round(time.Second))
	}
}
