package connect

// What a service registers: its procedures by path, each a unary, server-streaming or
// client-streaming handler over the call's request message.

import (
	"context"
	"net/http"

	"google.golang.org/protobuf/proto"
)

// Call is one RPC: its context (deadline from Connect-Timeout-Ms, cancelled when the client
// goes away), its headers, and its request message in the call's codec.
type Call struct {
	Ctx    context.Context
	Header http.Header
	Body   []byte
	codec  *codec
}

// Decode reads the request message into m.
func (c *Call) Decode(m proto.Message) error {
	if err := c.codec.unmarshal(c.Body, m); err != nil {
		return Errorf(CodeInvalidArgument, "invalid request message: %v", err)
	}
	return nil
}

// UnaryFunc answers one request message with one message.
type UnaryFunc func(c *Call) (proto.Message, error)

// StreamFunc sends messages with send until it returns; its error ends the stream.
type StreamFunc func(c *Call, send func(msg proto.Message) error) error

// ClientStreamFunc reads the request messages with recv (false once the client has sent its
// last) and answers with one message.
type ClientStreamFunc func(c *Call, recv func(m proto.Message) (bool, error)) (proto.Message, error)

// Routes are the procedures served, by path ("/process.Process/Start").
type Routes struct {
	unary        map[string]UnaryFunc
	stream       map[string]StreamFunc
	clientStream map[string]ClientStreamFunc
}

func NewRoutes() *Routes {
	return &Routes{unary: map[string]UnaryFunc{}, stream: map[string]StreamFunc{}, clientStream: map[string]ClientStreamFunc{}}
}

// Unary serves path with h.
func (rt *Routes) Unary(path string, h UnaryFunc) { rt.unary[path] = h }

// Stream serves path (a server stream) with h.
func (rt *Routes) Stream(path string, h StreamFunc) { rt.stream[path] = h }

// ClientStream serves path (a client stream) with h.
func (rt *Routes) ClientStream(path string, h ClientStreamFunc) { rt.clientStream[path] = h }

// Largest request message accepted (SendInput carries stdin chunks).
const maxRequestMessage = 16 << 20

// Serve answers the request if its path names a known procedure (false otherwise); auth
// checks the caller before the request message is read.
func (rt *Routes) Serve(w http.ResponseWriter, r *http.Request, auth func(*http.Request) *Error) bool {
	if u, ok := rt.unary[r.URL.Path]; ok {
		rt.serveUnary(w, r, u, auth)
		return true
	}
	if s, ok := rt.stream[r.URL.Path]; ok {
		rt.serveStream(w, r, s, auth)
		return true
	}
	if s, ok := rt.clientStream[r.URL.Path]; ok {
		rt.serveClientStream(w, r, s, auth)
		return true
	}
	return false
}
