package filesystem

// GET /files (download) and POST /files (upload: multipart/form-data with one or more `file`
// parts, or application/octet-stream with ?path=), as E2B's envd serves them.

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"aenv/envd/internal/respond"
	"aenv/envd/internal/users"
)

// A `file` part without a filename is buffered (not streamed), hence its bound.
const textPartLimit = 8 << 20

// Large reads and writes: every syscall and socket write is a trip through gVisor.
const copyBuffer = 1 << 20

// Download serves GET /files: ?path= (for ?username=, signed or with the token).
func (s *Service) Download(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	u, err := s.filesCaller(r, q, "read")
	if err != nil {
		return err
	}
	enc := negotiateEncoding(r.Header.Get("Accept-Encoding"))
	if enc == "" {
		return respond.Err(406, "no acceptable encoding found, supported: "+acceptableEncodings)
	}
	p := s.users.Path(q.Get("path"), u)
	f, err := os.Open(p)
	if err != nil {
		return openError(p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return respond.Err(httpStatus(err), "cannot stat '"+p+"': "+err.Error())
	}
	if st.IsDir() {
		return respond.Err(400, "path '"+p+"' is a directory")
	}
	// Regular files are sent with their size at open time (a file that grows meanwhile is cut
	// there); pseudo files (/proc, /sys: size 0 or a made-up size) are streamed to EOF.
	pseudo := strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/")
	sized := st.Mode().IsRegular() && st.Size() > 0 && !pseudo
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(filepath.Base(p)))
	h.Set("Last-Modified", st.ModTime().UTC().Format(http.TimeFormat))
	h.Set("Vary", "Accept-Encoding")
	if enc == encodingGzip && sized && !worthCompressing(f, st.Size()) {
		enc = encodingIdentity
	}
	var src io.Reader = f
	if sized {
		src = io.LimitReader(f, st.Size())
	}
	if enc == encodingGzip {
		h.Set("Content-Encoding", encodingGzip)
	} else if sized {
		h.Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	}
	w.WriteHeader(200)
	if r.Method == http.MethodHead {
		return nil
	}
	var dst io.Writer = w
	var zw *gzip.Writer
	if enc == encodingGzip {
		// The sandbox's own CPU pays for it, on most reads (fetch and httpx ask for gzip on their
		// own): the fastest level.
		zw, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		dst = zw
	}
	buf := make([]byte, copyBuffer)
	if _, err := io.CopyBuffer(dst, src, buf); err != nil {
		// the answer has started: only cutting the connection can tell the client
		panic(http.ErrAbortHandler)
	}
	if zw != nil && zw.Close() != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

// written is what an upload answers for each file.
type written struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Upload serves POST /files: one file (?path=) or several (multipart), written for
// ?username= (signed or with the token).
func (s *Service) Upload(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	u, err := s.filesCaller(r, q, "write")
	if err != nil {
		return err
	}
	meta, err := metadataFromHeaders(r.Header)
	if err != nil {
		return err
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []written
	switch ct {
	case "multipart/form-data":
		out, err = s.uploadMultipart(r, u, q, params["boundary"], meta)
	case "application/octet-stream":
		out, err = s.uploadOctetStream(r, u, q, meta)
	default:
		if ct == "" {
			ct = "(none)"
		}
		return respond.Err(400, "unsupported content type '"+ct+"'")
	}
	if err != nil {
		// a body left unread would be parsed as the next request
		w.Header().Set("Connection", "close")
		return err
	}
	respond.JSON(w, 200, out)
	return nil
}

func finish(target string, meta map[string]string) written {
	wr := written{Path: target, Name: filepath.Base(target), Type: "file"}
	if len(meta) > 0 {
		wr.Metadata = meta // written with the file (writeUpload)
	}
	return wr
}

func (s *Service) uploadOctetStream(r *http.Request, u *users.User, q url.Values, meta map[string]string) ([]written, error) {
	raw := q.Get("path")
	if raw == "" {
		return nil, respond.Err(400, "query parameter 'path' is required for application/octet-stream uploads")
	}
	target := s.users.Path(raw, u)
	var src io.Reader = r.Body
	switch strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))) {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, respond.Err(400, "invalid compressed body: "+err.Error())
		}
		src = zr
	case "deflate":
		zr, err := zlib.NewReader(r.Body)
		if err != nil {
			return nil, respond.Err(400, "invalid compressed body: "+err.Error())
		}
		src = zr
	default:
		return nil, respond.Err(400, "unsupported content encoding '"+r.Header.Get("Content-Encoding")+"'")
	}
	if err := writeUpload(target, src, u, meta); err != nil {
		return nil, err
	}
	return []written{finish(target, meta)}, nil
}

// undici escapes `"`, CR and LF in multipart filenames.
func decodeFilename(name string) string {
	r := strings.NewReplacer("%22", `"`, "%0D", "\r", "%0d", "\r", "%0A", "\n", "%0a", "\n")
	return r.Replace(name)
}

func (s *Service) uploadMultipart(r *http.Request, u *users.User, q url.Values, boundary string, meta map[string]string) ([]written, error) {
	if boundary == "" {
		return nil, respond.Err(400, "invalid multipart request: no boundary")
	}
	// multipart's own buffer is 4 KiB: a read (a trip through gVisor) per 4 KiB otherwise.
	mr := multipart.NewReader(bufio.NewReaderSize(r.Body, copyBuffer), boundary)
	queryPath := q.Get("path")
	seen := map[string]bool{}
	var out []written
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, respond.Err(400, "invalid multipart body: "+err.Error())
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		// The raw filename: Part.FileName() would cut it to its base name.
		_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		filename, hasName := dp["filename"]
		var src io.Reader = part
		if !hasName {
			// FormData.append("file", "text"): a field; its bytes are the content, bounded.
			b, err := io.ReadAll(io.LimitReader(part, textPartLimit+1))
			if err != nil {
				return nil, respond.Err(400, "invalid multipart body: "+err.Error())
			}
			if len(b) > textPartLimit {
				return nil, respond.Err(413, "a 'file' part without a filename is limited to "+strconv.Itoa(textPartLimit)+" bytes; send it with a filename")
			}
			src = strings.NewReader(string(b))
		}
		given := queryPath
		if given == "" && filename != "" {
			given = decodeFilename(filename)
		}
		if given == "" {
			return nil, respond.Err(400, "missing file path (part filename or query 'path')")
		}
		target := s.users.Path(given, u)
		if seen[target] {
			return nil, respond.Err(400, "duplicate path '"+target+"' in upload")
		}
		seen[target] = true
		if err := writeUpload(target, src, u, meta); err != nil {
			return nil, err
		}
		out = append(out, finish(target, meta))
	}
	if len(out) == 0 {
		return nil, respond.Err(400, "no file parts in multipart body")
	}
	return out, nil
}

// copyLarge copies in writes of up to 1 MiB: reads (multipart parts, the socket) come in
// pieces of a few KiB, and every write is a trip through gVisor.
func copyLarge(dst io.Writer, src io.Reader) error {
	buf := make([]byte, copyBuffer)
	for {
		n, err := 0, error(nil)
		for n < len(buf) && err == nil {
			var m int
			m, err = src.Read(buf[n:])
			n += m
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		// only a clean EOF ends the file: a cut body (io.ErrUnexpectedEOF) must not replace it
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
