package hub

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// progress draws one file's transfer: a bar redrawn in place on a terminal, else a single line
// when the transfer starts.
type progress struct {
	w     io.Writer // nil: a terminal bar is not drawn
	name  string
	size  int64
	last  time.Time
	start time.Time
	from  int64
}

func newProgress(out io.Writer, name string, have, size int64) *progress {
	if out == nil {
		return &progress{}
	}
	if f, ok := out.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		verb := "downloading"
		if have > 0 {
			verb = fmt.Sprintf("resuming at %s", formatSize(have))
		}
		fmt.Fprintf(out, "hub: %s %s (%s)\n", verb, name, formatSize(size))
		return &progress{}
	}
	p := &progress{w: out, name: name, size: size, start: time.Now(), from: have}
	p.draw(have)
	return p
}

func (p *progress) set(have int64) {
	if p.w == nil || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.draw(have)
}

func (p *progress) draw(have int64) {
	p.last = time.Now()
	const width = 30
	frac := 1.0
	if p.size > 0 {
		frac = float64(have) / float64(p.size)
	}
	n := int(frac * width)
	rate := ""
	if s := time.Since(p.start).Seconds(); s > 0.5 {
		rate = formatSize(int64(float64(have-p.from)/s)) + "/s"
	}
	fmt.Fprintf(p.w, "\r%-32.32s [%s%s] %5.1f%% %s/%s %s\x1b[K", p.name, strings.Repeat("=", n), strings.Repeat(" ", width-n),
		100*frac, formatSize(have), formatSize(p.size), rate)
}

func (p *progress) done() {
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}
