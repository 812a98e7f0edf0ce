package connect

// The two Connect codecs, both over the messages generated from packages/protocol/proto
// (internal/gen): proto3 JSON (the JS SDK, aenv's server) and the binary wire format (the Python
// SDK). Errors and the end of a stream are JSON whichever codec the call uses (the Connect
// protocol's rule).

import (
	"bytes"

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
