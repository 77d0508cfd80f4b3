package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/infer/wire"
)

// Error types, as OpenAI names them.
const (
	typeInvalid  = "invalid_request_error"
	typeAuth     = "authentication_error"
	typePerm     = "permission_error"
	typeNotFound = "not_found_error"
	typeConflict = "conflict_error"
	typeOverload = "overloaded_error"
	typeServer   = "server_error"
)

// apiError is an error answered as OpenAI does: {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status  int
	typ     string
	code    string
	param   string
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "invalid_value", param: param, message: fmt.Sprintf(format, args...)}
}

func unsupported(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "unsupported_value", param: param, message: fmt.Sprintf(format, args...)}
}

// toAPIError makes err an *apiError: a deadline is a 504, anything else unknown a 500 whose
// message is kept.
func toAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, context.Canceled): // the client went away: nobody reads this
		return &apiError{status: 499, typ: typeInvalid, code: "client_closed_request", message: "the client closed the request"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout", message: "the request took longer than the server allows"}
	}
	return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "internal_error", message: err.Error()}
}

// writeError answers err as JSON.
func writeError(w http.ResponseWriter, err error) {
	ae := toAPIError(err)
	body := struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}{}
	body.Error.Message, body.Error.Type = ae.message, ae.typ
	if ae.param != "" {
		body.Error.Param = &ae.param
	}
	if ae.code != "" {
		body.Error.Code = &ae.code
	}
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // tool-call tags stay readable
	_ = enc.Encode(v)
}

// jsonType is the Content-Type of every JSON answer (a header value is never modified once set).
var jsonType = []string{"application/json"}

// binaryType is the Content-Type of a completion in wire's binary form.
var binaryType = []string{wire.BinaryType}

// writeBytes answers the JSON body b, with its length.
func writeBytes(w http.ResponseWriter, status int, b []byte) { writeTyped(w, status, jsonType, b) }

// writeTyped answers the body b of type typ, with its length.
func writeTyped(w http.ResponseWriter, status int, typ []string, b []byte) {
	h := w.Header()
	h["Content-Type"] = typ
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// acceptsBinary reports whether a request's Accept header names wire's binary completion form
// (parameters aside); a client that does not name it gets JSON.
func acceptsBinary(h http.Header) bool {
	for _, v := range h["Accept"] {
		for r := range strings.SplitSeq(v, ",") {
			typ, _, _ := strings.Cut(r, ";")
			if strings.EqualFold(strings.TrimSpace(typ), wire.BinaryType) {
				return true
			}
		}
	}
	return false
}

// readBody reads r's body, at most limit bytes within timeout, into buf, which it grows. The
// routes read the body whatever the Content-Type says (curl -d sends a form type).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration, buf *[]byte) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	b := (*buf)[:0]
	if n := r.ContentLength; n > 0 && n <= limit {
		b = slices.Grow(b, int(n)+1) // +1: the read that finds the end needs room
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 512)
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*buf = b
			return nil, bodyError(err, limit)
		}
	}
	*buf = b
	// Read to its end: lift the deadline, so that the connection's background read does not
	// cancel a long generation. On an error it stays, bounding what the server reads after.
	_ = rc.SetReadDeadline(time.Time{})
	return b, nil
}

// buffers hold request and response bodies between requests.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled is the largest buffer kept for reuse: a rare large body is left to the collector.
const maxPooled = 1 << 20

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooled {
		*b = (*b)[:0]
		buffers.Put(b)
	}
}

// decodeBody decodes one JSON value from data into v; strict refuses unknown fields (the agentrl
// routes); the OpenAI routes ignore them as OpenAI-compatible servers do.
func decodeBody(data []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("", "the request body is empty: it must be a JSON object")
		}
		return badRequest("", "malformed JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("", "malformed JSON body: data after the JSON object")
	}
	return nil
}

func bodyError(err error, limit int64) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalid, code: "body_too_large",
			message: fmt.Sprintf("the request body is larger than %d bytes", limit)}
	}
	return &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "body_unreadable", message: "reading the request body: " + err.Error()}
}
