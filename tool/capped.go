package tool

// CappedBuffer is an io.Writer that keeps the head and the tail of what is written, limit bytes
// in all, and marks how much it dropped in between: the last lines of a child's stderr matter
// more than its middle. Writes never fail; it is safe for concurrent use.
type CappedBuffer struct{ b *cappedBuffer }

// NewCappedBuffer keeps the first three quarters of limit bytes and the last quarter.
func NewCappedBuffer(limit int) *CappedBuffer { return &CappedBuffer{newCappedBuffer(limit, nil)} }

// Write implements io.Writer.
func (c *CappedBuffer) Write(p []byte) (int, error) { return c.b.Write(p) }

// String returns what was kept, with a marker where bytes were dropped, as valid UTF-8, and
// whether any were dropped.
func (c *CappedBuffer) String() (s string, truncated bool) { return c.b.String() }

// TruncateText cuts s to at most max bytes on a rune boundary, with a marker.
func TruncateText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	b := newCappedBuffer(max, nil)
	b.headCap, b.tailCap = max, 0
	_, _ = b.Write([]byte(s))
	out, _ := b.String()
	return out
}
