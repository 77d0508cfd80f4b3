package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// streamWriteTimeout bounds writing one server-sent event: a client that stops reading is cut
// off rather than holding its generation's slot.
const streamWriteTimeout = 30 * time.Second

// sse writes server-sent events ("data: JSON\n\n", then "data: [DONE]\n\n"). Safe for
// concurrent use: the choices of one request stream from their own goroutines.
type sse struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (e *sse) send(v any) error {
	var b bytes.Buffer
	b.WriteString("data: ")
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // ends the line
		return err
	}
	b.WriteByte('\n')
	return e.write(b.Bytes())
}

// event sends a named event ("event: NAME\ndata: JSON\n\n"), as the Responses API streams.
func (e *sse) event(name string, v any) error {
	var b bytes.Buffer
	b.WriteString("event: " + name + "\ndata: ")
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.WriteByte('\n')
	return e.write(b.Bytes())
}

func (e *sse) write(b []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := e.w.Write(b); err != nil {
		e.err = err
		return err
	}
	if err := e.rc.Flush(); err != nil {
		e.err = err
	}
	return e.err
}

// fail sends err as an error event; the stream then ends with [DONE].
func (e *sse) fail(err error) {
	ae := toAPIError(err)
	_ = e.send(map[string]any{"error": map[string]any{"message": ae.message, "type": ae.typ, "code": ae.code}})
}

func (e *sse) done() { _ = e.write([]byte("data: [DONE]\n\n")) }
