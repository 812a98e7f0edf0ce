package connect

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	fspb "aenv/envd/internal/gen/filesystem"
	"google.golang.org/protobuf/proto"
)

const statPath = "/filesystem.Filesystem/Stat"

func noAuth(*http.Request) *Error { return nil }

// call sends body to path with the content type and headers given and answers the recorded response.
func call(rt *Routes, auth func(*http.Request) *Error, path, ctype string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", path, bytes.NewReader(body))
	r.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	if !rt.Serve(w, r, auth) {
		w.WriteHeader(404)
	}
	return w
}

// statRoutes answers Stat with the request's path as the entry's name, or fails as the path says.
func statRoutes() *Routes {
	rt := NewRoutes()
	rt.Unary(statPath, func(c *Call) (proto.Message, error) {
		req := &fspb.StatRequest{}
		if err := c.Decode(req); err != nil {
			return nil, err
		}
		switch req.GetPath() {
		case "/missing":
			return nil, Errorf(CodeNotFound, "path '%s' does not exist", req.GetPath())
		case "/plain":
			return nil, errors.New("boom")
		}
		return &fspb.StatResponse{Entry: &fspb.EntryInfo{Name: req.GetPath()}}, nil
	})
	return rt
}

func TestUnary(t *testing.T) {
	rt := statRoutes()
	for _, c := range []struct {
		name, ctype, body string
		auth              func(*http.Request) *Error
		status            int
		answer            string
	}{
		{"json", "application/json", `{"path":"/x","extra":1}`, noAuth, 200, `{"entry":{"name":"/x"}}`},
		{"empty body is the empty message", "application/json; charset=utf-8", ``, noAuth, 200, `{"entry":{}}`},
		{"coded error", "application/json", `{"path":"/missing"}`, noAuth, 404, `{"code":"not_found","message":"path '/missing' does not exist"}`},
		{"other error", "application/json", `{"path":"/plain"}`, noAuth, 500, `{"code":"internal","message":"boom"}`},
		{"bad message", "application/json", `{"path":3}`, noAuth, 400, `"code":"invalid_argument"`},
		{"refused caller", "application/json", `{"path":"/x"}`, func(*http.Request) *Error { return Errorf(CodeUnauthenticated, "no") }, 401, `{"code":"unauthenticated","message":"no"}`},
		{"unknown codec", "text/plain", `{}`, noAuth, 415, `unsupported content type`},
	} {
		w := call(rt, c.auth, statPath, c.ctype, []byte(c.body), nil)
		got := strings.TrimSpace(strings.ReplaceAll(w.Body.String(), " ", ""))
		want := strings.ReplaceAll(c.answer, " ", "")
		if w.Code != c.status || !strings.Contains(got, want) {
			t.Errorf("%s: %d %s, want %d %s", c.name, w.Code, w.Body.String(), c.status, c.answer)
		}
	}
	// The binary codec answers in kind.
	in, _ := proto.Marshal(&fspb.StatRequest{Path: "/bin"})
	w := call(rt, noAuth, statPath, "application/proto", in, nil)
	res := &fspb.StatResponse{}
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/proto" || proto.Unmarshal(w.Body.Bytes(), res) != nil || res.GetEntry().GetName() != "/bin" {
		t.Fatalf("proto: %d %q", w.Code, w.Body.Bytes())
	}
	if w := call(rt, noAuth, "/filesystem.Filesystem/Nope", "application/json", nil, nil); w.Code != 404 {
		t.Fatalf("an unknown procedure is not served: %d", w.Code)
	}
	if w := call(rt, noAuth, statPath, "application/json", nil, map[string]string{"Connect-Timeout-Ms": "soon"}); w.Code != 400 ||
		!strings.Contains(w.Body.String(), "invalid Connect-Timeout-Ms") {
		t.Fatalf("bad timeout: %d %s", w.Code, w.Body.String())
	}
}

func envelope(flags byte, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// envelopes splits a stream's answer into its envelopes' flags and payloads.
func envelopes(t *testing.T, b []byte) (flags []byte, payloads []string) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated envelope %q", b)
		}
		n := binary.BigEndian.Uint32(b[1:5])
		flags = append(flags, b[0])
		payloads = append(payloads, string(b[5:5+n]))
		b = b[5+n:]
	}
	return flags, payloads
}

func TestServerStream(t *testing.T) {
	rt := NewRoutes()
	rt.Stream("/filesystem.Filesystem/WatchDir", func(c *Call, send func(proto.Message) error) error {
		req := &fspb.WatchDirRequest{}
		if err := c.Decode(req); err != nil {
			return err
		}
		for _, n := range []string{"a", "b"} {
			if err := send(&fspb.FilesystemEvent{Name: req.GetPath() + n}); err != nil {
				return err
			}
		}
		if req.GetRecursive() {
			return nil
		}
		return Errorf(CodeAborted, "stopped")
	})
	path := "/filesystem.Filesystem/WatchDir"
	w := call(rt, noAuth, path, "application/connect+json", envelope(0, []byte(`{"path":"/d/"}`)), nil)
	flags, payloads := envelopes(t, w.Body.Bytes())
	if w.Code != 200 || string(flags) != "\x00\x00\x02" || payloads[0] != `{"name":"/d/a"}` ||
		payloads[2] != `{"error":{"code":"aborted","message":"stopped"}}` {
		t.Fatalf("%d %q %q", w.Code, flags, payloads)
	}
	w = call(rt, noAuth, path, "application/connect+json", envelope(0, []byte(`{"path":"/d/","recursive":true}`)), nil)
	if flags, payloads = envelopes(t, w.Body.Bytes()); len(flags) != 3 || payloads[2] != "{}" {
		t.Fatalf("a clean end is {}: %q", payloads)
	}
	// Errors before the handler runs are the stream's end too, in a 200 answer.
	w = call(rt, noAuth, path, "application/connect+json", envelope(flagCompressed, []byte(`{}`)), nil)
	if flags, payloads = envelopes(t, w.Body.Bytes()); w.Code != 200 || len(flags) != 1 || flags[0] != flagEndStream ||
		!strings.Contains(payloads[0], `"code":"unimplemented"`) {
		t.Fatalf("compressed: %d %q", w.Code, payloads)
	}
	w = call(rt, func(*http.Request) *Error { return Errorf(CodeUnauthenticated, "no") }, path, "application/connect+proto", nil, nil)
	if _, payloads = envelopes(t, w.Body.Bytes()); w.Header().Get("Content-Type") != "application/connect+proto" ||
		payloads[0] != `{"error":{"code":"unauthenticated","message":"no"}}` {
		t.Fatalf("refused: %q %q", w.Header().Get("Content-Type"), payloads)
	}
	if w = call(rt, noAuth, path, "application/json", nil, nil); w.Code != 415 {
		t.Fatalf("a unary content type on a stream: %d", w.Code)
	}
}

func TestClientStream(t *testing.T) {
	rt := NewRoutes()
	rt.ClientStream("/x.X/Collect", func(c *Call, recv func(proto.Message) (bool, error)) (proto.Message, error) {
		var names []string
		for {
			m := &fspb.StatRequest{}
			more, err := recv(m)
			if err != nil || !more {
				return &fspb.EntryInfo{Name: strings.Join(names, ",")}, err
			}
			names = append(names, m.GetPath())
		}
	})
	var body []byte
	for _, p := range []string{"a", "b", "c"} {
		b, _ := proto.Marshal(&fspb.StatRequest{Path: p})
		body = append(body, envelope(0, b)...)
	}
	w := call(rt, noAuth, "/x.X/Collect", "application/connect+proto", body, nil)
	flags, payloads := envelopes(t, w.Body.Bytes())
	res := &fspb.EntryInfo{}
	if len(flags) != 2 || proto.Unmarshal([]byte(payloads[0]), res) != nil || res.GetName() != "a,b,c" || payloads[1] != "{}" {
		t.Fatalf("%q %q", flags, payloads)
	}
	// A cut envelope is the client's error.
	w = call(rt, noAuth, "/x.X/Collect", "application/connect+proto", body[:len(body)-1], nil)
	if _, payloads = envelopes(t, w.Body.Bytes()); len(payloads) != 1 || !strings.Contains(payloads[0], `"code":"invalid_argument"`) {
		t.Fatalf("cut: %q", payloads)
	}
}

func TestReadEnvelopeLimits(t *testing.T) {
	if b, err := readEnvelope(bytes.NewReader(nil)); b != nil || err != nil {
		t.Fatalf("the end of the body: %q %v", b, err)
	}
	huge := make([]byte, 5)
	binary.BigEndian.PutUint32(huge[1:], maxRequestMessage+1)
	if _, err := readEnvelope(io.MultiReader(bytes.NewReader(huge))); err == nil || err.(*Error).Code != CodeResourceExhausted {
		t.Fatalf("too large: %v", err)
	}
}

func TestKeepaliveInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 90 * time.Second, "1.5": 1500 * time.Millisecond, "-1": 90 * time.Second, "x": 90 * time.Second} {
		if got := KeepaliveInterval(http.Header{"Keepalive-Ping-Interval": {v}}); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
