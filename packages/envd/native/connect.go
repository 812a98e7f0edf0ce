package main

// Connect RPC over HTTP/1.1 with the JSON codec: unary calls and server streams, the two
// kinds the e2b SDK and aenv's server use. The binary codec is refused (415): no client of
// ours sends it, and protobuf's wire format would need a generated-code dependency.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
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

// RPCError is an error with a Connect code; any other error is "internal".
type RPCError struct {
	Code    string
	Message string
}

func (e *RPCError) Error() string { return e.Code + ": " + e.Message }

func rpcErr(code, format string, args ...interface{}) *RPCError {
	return &RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func asRPCError(err error) *RPCError {
	if e, ok := err.(*RPCError); ok {
		return e
	}
	if err == context.DeadlineExceeded {
		return &RPCError{Code: CodeDeadlineExceeded, Message: "the operation timed out"}
	}
	if err == context.Canceled {
		return &RPCError{Code: CodeCanceled, Message: "the operation was canceled"}
	}
	return &RPCError{Code: CodeInternal, Message: err.Error()}
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Call is one RPC: its context (deadline from Connect-Timeout-Ms, cancelled when the client
// goes away), its headers, and its request message as JSON.
type Call struct {
	Ctx    context.Context
	Header http.Header
	Body   []byte
}

// Decode reads the request message; unknown fields are ignored (proto3 JSON's rule).
func (c *Call) Decode(v interface{}) error {
	if len(bytes.TrimSpace(c.Body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.Body, v); err != nil {
		return rpcErr(CodeInvalidArgument, "invalid request message: %v", err)
	}
	return nil
}

type UnaryFunc func(c *Call) (interface{}, error)

// StreamFunc sends messages with send until it returns; its error ends the stream.
type StreamFunc func(c *Call, send func(msg interface{}) error) error

type rpcRoutes struct {
	unary  map[string]UnaryFunc
	stream map[string]StreamFunc
}

func newRPCRoutes() *rpcRoutes {
	return &rpcRoutes{unary: map[string]UnaryFunc{}, stream: map[string]StreamFunc{}}
}

// Largest request message accepted (SendInput carries base64 stdin chunks).
const maxRequestMessage = 16 << 20

func writeUnaryError(w http.ResponseWriter, e *RPCError) {
	status, ok := codeStatus[e.Code]
	if !ok {
		status = 500
	}
	body, _ := json.Marshal(wireError{e.Code, e.Message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func callContext(r *http.Request) (context.Context, context.CancelFunc, *RPCError) {
	ctx := r.Context()
	if raw := r.Header.Get("Connect-Timeout-Ms"); raw != "" {
		ms, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || ms < 0 || len(raw) > 10 {
			return nil, nil, rpcErr(CodeInvalidArgument, "invalid Connect-Timeout-Ms %q", raw)
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

// serve answers path if it names a known procedure; false otherwise.
func (rt *rpcRoutes) serve(w http.ResponseWriter, r *http.Request, auth func(*http.Request) *RPCError) bool {
	if u, ok := rt.unary[r.URL.Path]; ok {
		rt.serveUnary(w, r, u, auth)
		return true
	}
	if s, ok := rt.stream[r.URL.Path]; ok {
		rt.serveStream(w, r, s, auth)
		return true
	}
	return false
}

func (rt *rpcRoutes) serveUnary(w http.ResponseWriter, r *http.Request, h UnaryFunc, auth func(*http.Request) *RPCError) {
	if r.Method != http.MethodPost {
		writeUnaryError(w, rpcErr(CodeUnimplemented, "method %s not allowed", r.Method))
		return
	}
	switch mediaType(r) {
	case "application/json":
	case "application/proto":
		http.Error(w, "the binary codec is not supported: use application/json", http.StatusUnsupportedMediaType)
		return
	default:
		http.Error(w, "unsupported content type", http.StatusUnsupportedMediaType)
		return
	}
	if e := auth(r); e != nil {
		writeUnaryError(w, e)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestMessage+1))
	if err != nil {
		writeUnaryError(w, rpcErr(CodeCanceled, "reading the request: %v", err))
		return
	}
	if len(body) > maxRequestMessage {
		writeUnaryError(w, rpcErr(CodeResourceExhausted, "request message larger than %d bytes", maxRequestMessage))
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		writeUnaryError(w, rpcErr(CodeUnimplemented, "unsupported content encoding %q", enc))
		return
	}
	ctx, cancel, e := callContext(r)
	if e != nil {
		writeUnaryError(w, e)
		return
	}
	defer cancel()
	res, err := h(&Call{Ctx: ctx, Header: r.Header, Body: body})
	if err != nil {
		writeUnaryError(w, asRPCError(err))
		return
	}
	out, err := json.Marshal(res)
	if err != nil {
		writeUnaryError(w, asRPCError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(200)
	w.Write(out)
}

const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

func readEnvelope(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return nil, nil // no message: an empty request
		}
		return nil, rpcErr(CodeInvalidArgument, "reading the request envelope: %v", err)
	}
	if hdr[0]&flagCompressed != 0 {
		return nil, rpcErr(CodeUnimplemented, "compressed request messages are not supported")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxRequestMessage {
		return nil, rpcErr(CodeResourceExhausted, "request message larger than %d bytes", maxRequestMessage)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, rpcErr(CodeInvalidArgument, "reading the request message: %v", err)
	}
	return buf, nil
}

// streamWriter writes envelopes; safe for concurrent use (keepalives and events).
type streamWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	closed  bool
}

func (s *streamWriter) write(flags byte, payload []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return rpcErr(CodeCanceled, "the stream has ended")
	}
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := s.w.Write(append(hdr[:], payload...)); err != nil {
		s.closed = true
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

func (rt *rpcRoutes) serveStream(w http.ResponseWriter, r *http.Request, h StreamFunc, auth func(*http.Request) *RPCError) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch mediaType(r) {
	case "application/connect+json":
	case "application/connect+proto":
		http.Error(w, "the binary codec is not supported: use application/connect+json", http.StatusUnsupportedMediaType)
		return
	default:
		http.Error(w, "unsupported content type", http.StatusUnsupportedMediaType)
		return
	}
	fl, _ := w.(http.Flusher)
	sw := &streamWriter{w: w, flusher: fl}
	end := func(err error) {
		msg := []byte("{}")
		if err != nil {
			e := asRPCError(err)
			msg, _ = json.Marshal(map[string]wireError{"error": {e.Code, e.Message}})
		}
		sw.write(flagEndStream, msg)
		sw.mu.Lock()
		sw.closed = true
		sw.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/connect+json")
	if e := auth(r); e != nil {
		w.WriteHeader(200)
		end(e)
		return
	}
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		w.WriteHeader(200)
		end(rpcErr(CodeUnimplemented, "unsupported content encoding %q", enc))
		return
	}
	body, err := readEnvelope(r.Body)
	if err != nil {
		w.WriteHeader(200)
		end(err)
		return
	}
	ctx, cancel, e := callContext(r)
	if e != nil {
		w.WriteHeader(200)
		end(e)
		return
	}
	defer cancel()
	w.WriteHeader(200)
	if fl != nil {
		fl.Flush()
	}
	send := func(msg interface{}) error {
		b, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		return sw.write(0, b)
	}
	end(h(&Call{Ctx: ctx, Header: r.Header, Body: body}, send))
}

// keepaliveInterval is the stream's Keepalive-Ping-Interval header in seconds (default 90 s).
func keepaliveInterval(h http.Header) time.Duration {
	if s, err := strconv.ParseFloat(h.Get("Keepalive-Ping-Interval"), 64); err == nil && s > 0 && s < 2e6 {
		return time.Duration(s * float64(time.Second))
	}
	return 90 * time.Second
}
