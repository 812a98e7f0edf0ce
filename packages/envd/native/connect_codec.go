package main

// The two Connect codecs, both over the messages generated from packages/protocol/proto
// (internal/gen): proto3 JSON (the JS SDK, aenv's server) and the binary wire format (the Python
// SDK). Errors and the end of a stream are JSON whichever codec the call uses (the Connect
// protocol's rule).

import (
	"bytes"
	"context"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

type codec struct {
	name      string
	unmarshal func([]byte, proto.Message) error
	marshal   func(proto.Message) ([]byte, error)
}

var (
	// Unknown fields are ignored, as proto3 JSON asks of readers (newer clients may send more).
	jsonIn  = protojson.UnmarshalOptions{DiscardUnknown: true}
	jsonOut = protojson.MarshalOptions{}

	jsonCodec = &codec{
		name: "json",
		unmarshal: func(b []byte, m proto.Message) error {
			if len(bytes.TrimSpace(b)) == 0 {
				return nil // no body: the empty message
			}
			return jsonIn.Unmarshal(b, m)
		},
		marshal: jsonOut.Marshal,
	}
	protoCodec = &codec{name: "proto", unmarshal: proto.Unmarshal, marshal: proto.Marshal}
)

// unaryCodec is the codec a unary call's Content-Type names, or nil.
func unaryCodec(mediaType string) *codec {
	switch mediaType {
	case "application/json":
		return jsonCodec
	case "application/proto":
		return protoCodec
	}
	return nil
}

// streamCodec is the codec a streaming call's Content-Type names, or nil.
func streamCodec(mediaType string) *codec {
	switch mediaType {
	case "application/connect+json":
		return jsonCodec
	case "application/connect+proto":
		return protoCodec
	}
	return nil
}

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
		return rpcErr(CodeInvalidArgument, "invalid request message: %v", err)
	}
	return nil
}

type UnaryFunc func(c *Call) (proto.Message, error)

// StreamFunc sends messages with send until it returns; its error ends the stream.
type StreamFunc func(c *Call, send func(msg proto.Message) error) error

// ClientStreamFunc reads the request messages with recv (false once the client has sent its
// last) and answers with one message.
type ClientStreamFunc func(c *Call, recv func(m proto.Message) (bool, error)) (proto.Message, error)

type rpcRoutes struct {
	unary        map[string]UnaryFunc
	stream       map[string]StreamFunc
	clientStream map[string]ClientStreamFunc
}

func newRPCRoutes() *rpcRoutes {
	return &rpcRoutes{unary: map[string]UnaryFunc{}, stream: map[string]StreamFunc{}, clientStream: map[string]ClientStreamFunc{}}
}

// Largest request message accepted (SendInput carries stdin chunks).
const maxRequestMessage = 16 << 20

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
	if s, ok := rt.clientStream[r.URL.Path]; ok {
		rt.serveClientStream(w, r, s, auth)
		return true
	}
	return false
}
