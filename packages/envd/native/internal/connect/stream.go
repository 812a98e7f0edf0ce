package connect

// Connect streams: envelopes (a flag byte, a 4-byte big-endian length, the message) in both
// directions; the server's last one carries the end-of-stream flag and a JSON body, {} or
// {"error": …}. Server streams (Start, Connect, WatchDir) read one request envelope; client
// streams (StreamInput) read envelopes until the client closes the request body.

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
)

const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// readEnvelope reads one request message; nil (and no error) at the end of the body.
func readEnvelope(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return nil, nil
		}
		return nil, Errorf(CodeInvalidArgument, "reading the request envelope: %v", err)
	}
	if hdr[0]&flagCompressed != 0 {
		return nil, Errorf(CodeUnimplemented, "compressed request messages are not supported")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxRequestMessage {
		return nil, Errorf(CodeResourceExhausted, "request message larger than %d bytes", maxRequestMessage)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, Errorf(CodeInvalidArgument, "reading the request message: %v", err)
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
		return Errorf(CodeCanceled, "the stream has ended")
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

// end writes the end-of-stream envelope (with err, if any) and closes the stream.
func (s *streamWriter) end(err error) {
	msg := []byte("{}")
	if err != nil {
		e := asError(err)
		msg, _ = json.Marshal(map[string]wireError{"error": {e.Code, e.Message}})
	}
	s.write(flagEndStream, msg)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// openStream checks what every streaming call shares (method, codec, token, encoding,
// deadline) and answers 200 with the stream's headers. A nil call means the answer was
// already written.
func openStream(w http.ResponseWriter, r *http.Request, auth func(*http.Request) *Error) (*streamWriter, *Call, func()) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return nil, nil, nil
	}
	cd := streamCodec(mediaType(r))
	if cd == nil {
		http.Error(w, "unsupported content type: use application/connect+json or application/connect+proto", http.StatusUnsupportedMediaType)
		return nil, nil, nil
	}
	fl, _ := w.(http.Flusher)
	sw := &streamWriter{w: w, flusher: fl}
	w.Header().Set("Content-Type", "application/connect+"+cd.name)
	fail := func(e error) (*streamWriter, *Call, func()) {
		w.WriteHeader(200)
		sw.end(e)
		return nil, nil, nil
	}
	if e := auth(r); e != nil {
		return fail(e)
	}
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		return fail(Errorf(CodeUnimplemented, "unsupported content encoding %q", enc))
	}
	ctx, cancel, e := callContext(r)
	if e != nil {
		return fail(e)
	}
	return sw, &Call{Ctx: ctx, Header: r.Header, codec: cd}, cancel
}

func (rt *Routes) serveStream(w http.ResponseWriter, r *http.Request, h StreamFunc, auth func(*http.Request) *Error) {
	sw, call, cancel := openStream(w, r, auth)
	if call == nil {
		return
	}
	defer cancel()
	body, err := readEnvelope(r.Body)
	if err != nil {
		w.WriteHeader(200)
		sw.end(err)
		return
	}
	call.Body = body
	w.WriteHeader(200)
	if sw.flusher != nil {
		sw.flusher.Flush()
	}
	send := func(msg proto.Message) error {
		b, err := call.codec.marshal(msg)
		if err != nil {
			return err
		}
		return sw.write(0, b)
	}
	sw.end(h(call, send))
}

func (rt *Routes) serveClientStream(w http.ResponseWriter, r *http.Request, h ClientStreamFunc, auth func(*http.Request) *Error) {
	sw, call, cancel := openStream(w, r, auth)
	if call == nil {
		return
	}
	defer cancel()
	recv := func(m proto.Message) (bool, error) {
		b, err := readEnvelope(r.Body)
		if err != nil || b == nil {
			return false, err
		}
		if err := call.codec.unmarshal(b, m); err != nil {
			return false, Errorf(CodeInvalidArgument, "invalid request message: %v", err)
		}
		return true, nil
	}
	res, err := h(call, recv)
	w.WriteHeader(200)
	if err == nil {
		var b []byte
		if b, err = call.codec.marshal(res); err == nil {
			err = sw.write(0, b)
		}
	}
	sw.end(err)
}

// KeepaliveInterval is the stream's Keepalive-Ping-Interval header in seconds (default 90 s).
func KeepaliveInterval(h http.Header) time.Duration {
	if s, err := strconv.ParseFloat(h.Get("Keepalive-Ping-Interval"), 64); err == nil && s > 0 && s < 2e6 {
		return time.Duration(s * float64(time.Second))
	}
	return 90 * time.Second
}
