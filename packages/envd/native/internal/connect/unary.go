package connect

// Connect unary calls: one request message in the body, one answer (or a JSON error with the
// status its code maps to).

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

func writeUnaryError(w http.ResponseWriter, e *Error) {
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

func (rt *Routes) serveUnary(w http.ResponseWriter, r *http.Request, h UnaryFunc, auth func(*http.Request) *Error) {
	if r.Method != http.MethodPost {
		writeUnaryError(w, Errorf(CodeUnimplemented, "method %s not allowed", r.Method))
		return
	}
	cd := unaryCodec(mediaType(r))
	if cd == nil {
		http.Error(w, "unsupported content type: use application/json or application/proto", http.StatusUnsupportedMediaType)
		return
	}
	if e := auth(r); e != nil {
		writeUnaryError(w, e)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestMessage+1))
	if err != nil {
		writeUnaryError(w, Errorf(CodeCanceled, "reading the request: %v", err))
		return
	}
	if len(body) > maxRequestMessage {
		writeUnaryError(w, Errorf(CodeResourceExhausted, "request message larger than %d bytes", maxRequestMessage))
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		writeUnaryError(w, Errorf(CodeUnimplemented, "unsupported content encoding %q", enc))
		return
	}
	ctx, cancel, e := callContext(r)
	if e != nil {
		writeUnaryError(w, e)
		return
	}
	defer cancel()
	res, err := h(&Call{Ctx: ctx, Header: r.Header, Body: body, codec: cd})
	if err != nil {
		writeUnaryError(w, asError(err))
		return
	}
	out, err := cd.marshal(res)
	if err != nil {
		writeUnaryError(w, asError(err))
		return
	}
	w.Header().Set("Content-Type", "application/"+cd.name)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(200)
	w.Write(out)
}
