package tool

import (
	"fmt"
	"strings"
	"sync"
)

// cappedBuffer keeps the head and the tail of a stream and counts what it drops in between:
// a traceback's last lines matter more than its middle. Once the stream passes killAt bytes it
// calls onFlood once, so a run that only prints is stopped instead of printing until its CPU
// budget is gone. Writes never fail, so the child never blocks on a full pipe.
type cappedBuffer struct {
	mu      sync.Mutex // protects every field below; Go's exec copies from a goroutine
	head    []byte
	tail    []byte // ring of the last tailCap bytes once head is full
	tailPos int
	headCap int
	tailCap int
	total   int64
	killAt  int64
	onFlood func()
	flooded bool
}

func newCappedBuffer(limit int, onFlood func()) *cappedBuffer {
	tailCap := limit / 4
	return &cappedBuffer{
		headCap: limit - tailCap,
		tailCap: tailCap,
		killAt:  int64(limit) * outputKillFactor,
		onFlood: onFlood,
	}
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if room := b.headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 && b.tailCap > 0 {
		if len(b.tail) < b.tailCap {
			k := min(b.tailCap-len(b.tail), len(p))
			b.tail = append(b.tail, p[:k]...)
			p = p[k:]
			continue
		}
		// Only the last tailCap bytes of p can survive; skip the rest at once.
		if len(p) > b.tailCap {
			p = p[len(p)-b.tailCap:]
		}
		k := copy(b.tail[b.tailPos:], p)
		p = p[k:]
		b.tailPos = (b.tailPos + k) % b.tailCap
	}
	if b.total > b.killAt && !b.flooded {
		b.flooded = true
		if b.onFlood != nil {
			b.onFlood()
		}
	}
	return n, nil
}

// String returns what was kept, with a marker where bytes were dropped, as valid UTF-8.
func (b *cappedBuffer) String() (s string, truncated bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := int64(len(b.head) + len(b.tail))
	var sb strings.Builder
	sb.Write(b.head)
	if dropped := b.total - kept; dropped > 0 {
		truncated = true
		fmt.Fprintf(&sb, "\n…[%d bytes truncated]…\n", dropped)
	}
	sb.Write(b.tail[b.tailPos:])
	sb.Write(b.tail[:b.tailPos])
	return strings.ToValidUTF8(sb.String(), "\uFFFD"), truncated
}
