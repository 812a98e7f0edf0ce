// Package respond writes the answers of envd's plain HTTP routes (everything but Connect):
// JSON bodies, and failures as the `{code, message}` body E2B's envd answers with.
package respond

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// Error is a plain route's failure: its status and message.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Err is a failure answered with status and msg.
func Err(status int, msg string) *Error { return &Error{status, msg} }

// JSON answers body as JSON with status.
func JSON(w http.ResponseWriter, status int, body interface{}) {
	b, err := json.Marshal(body)
	if err != nil {
		status, b = 500, []byte(`{"code":500,"message":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// Fail answers a failure: status and the body `{code: status, message: msg}`.
func Fail(w http.ResponseWriter, status int, msg string) {
	JSON(w, status, map[string]interface{}{"code": status, "message": msg})
}

// ReadBody reads a whole (small) request body, bounded.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, Err(400, "reading the request body: "+err.Error())
	}
	if int64(len(b)) > limit {
		return nil, Err(413, "request body too large")
	}
	return b, nil
}

// MethodIs: nil when the request's method is one of methods, else 405.
func MethodIs(r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	return Err(405, "method not allowed")
}
