// Package connect serves Connect RPC over HTTP/1.1, as the e2b SDKs and aenv's server call
// envd: the error codes and the errors handlers return (here), the two codecs (codec.go),
// the procedures a service registers (routes.go), unary calls (unary.go) and streams
// (stream.go).
package connect

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Connect error codes (their JSON strings) and the HTTP status each maps to.
const (
	CodeCanceled           = "canceled"
	CodeUnknown            = "unknown"
	CodeInvalidArgument    = "invalid_argument"
	CodeDeadlineExceeded   = "deadline_exceeded"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodePermissionDenied   = "permission_denied"
	CodeResourceExhausted  = "resource_exhausted"
	CodeFailedPrecondition = "failed_precondition"
	CodeAborted            = "aborted"
	CodeOutOfRange         = "out_of_range"
	CodeUnimplemented      = "unimplemented"
	CodeInternal           = "internal"
	CodeUnavailable        = "unavailable"
	CodeUnauthenticated    = "unauthenticated"
)

var codeStatus = map[string]int{
	CodeCanceled: 499, CodeUnknown: 500, CodeInvalidArgument: 400, CodeDeadlineExceeded: 504,
	CodeNotFound: 404, CodeAlreadyExists: 409, CodePermissionDenied: 403, CodeResourceExhausted: 429,
	CodeFailedPrecondition: 400, CodeAborted: 409, CodeOutOfRange: 400, CodeUnimplemented: 501,
	CodeInternal: 500, CodeUnavailable: 503, CodeUnauthenticated: 401,
}

// Error is an error with a Connect code; any other error is "internal".
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func Errorf(code, format string, args ...interface{}) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func asError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	if err == context.DeadlineExceeded {
		return &Error{Code: CodeDeadlineExceeded, Message: "the operation timed out"}
	}
	if err == context.Canceled {
		return &Error{Code: CodeCanceled, Message: "the operation was canceled"}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func callContext(r *http.Request) (context.Context, context.CancelFunc, *Error) {
	ctx := r.Context()
	if raw := r.Header.Get("Connect-Timeout-Ms"); raw != "" {
		ms, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || ms < 0 || len(raw) > 10 {
			return nil, nil, Errorf(CodeInvalidArgument, "invalid Connect-Timeout-Ms %q", raw)
		}
		c, cancel := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		return c, cancel, nil
	}
	c, cancel := context.WithCancel(ctx)
	return c, cancel, nil
}

func mediaType(r *http.Request) string {
	t := r.Header.Get("Content-Type")
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = t[:i]
	}
	return strings.ToLower(strings.TrimSpace(t))
}
