package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressReporter shows a count of work done on w, as the trainer's console does: a bar on a
// terminal, otherwise a line at most every 5 s (none for work done within 5 s). Calls must be
// serialized.
func progressReporter(w io.Writer, terminal bool, name, unit string) func(done, total int) {
	var bar *progressbar.ProgressBar
	start := time.Now()
	last := start
	return func(done, total int) {
		if terminal {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(name),
					progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionSetWidth(24),
					progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
			}
			_ = bar.Set(done)
			if done == total {
				_ = bar.Finish()
			}
			return
		}
		now := time.Now()
		if now.Sub(last) < 5*time.Second {
			return
		}
		last = now
		el := now.Sub(start)
		eta := time.Duration(float64(el) / float64(done) * float64(total-done))
		fmt.Fprintf(w, "%s %s %d/%d  (%s, eta %s)\n", name, unit, done, total, el.Round(time.Second), eta.Round(time.Second))
	}
}
