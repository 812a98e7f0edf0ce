package main

// GET /files (download) and POST /files (upload: multipart/form-data with one or more `file`
// parts, or application/octet-stream with ?path=), as E2B's envd serves them.

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A `file` part without a filename is buffered (not streamed), hence its bound.
const textPartLimit = 8 << 20

// Large reads and writes: every syscall and socket write is a trip through gVisor.
const copyBuffer = 1 << 20

func authorizeFiles(env *Env, r *http.Request, q url.Values, op string) (*User, error) {
	if msg := checkFilesAuth(env.State.Token(), r.Header.Get("X-Access-Token"), q, op); msg != "" {
		return nil, httpErr(401, msg)
	}
	requested := q.Get("username")
	u := env.resolveUser(requested)
	if u == nil {
		return nil, httpErr(401, "invalid username: '"+requested+"'")
	}
	return u, nil
}

func handleDownload(env *Env, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	u, err := authorizeFiles(env, r, q, "read")
	if err != nil {
		return err
	}
	p := env.resolvePathFor(q.Get("path"), u)
	f, err := os.Open(p)
	if err != nil {
		if errnoOf(err) == syscall.ENOENT {
			return httpErr(404, "path '"+p+"' does not exist")
		}
		return httpErr(statusForErrno(err), "cannot open '"+p+"': "+err.Error())
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return httpErr(statusForErrno(err), "cannot stat '"+p+"': "+err.Error())
	}
	if st.IsDir() {
		return httpErr(400, "path '"+p+"' is a directory")
	}
	// Regular files are sent with their size at open time (a file that grows meanwhile is cut
	// there); pseudo files (/proc, /sys: size 0 or a made-up size) are streamed to EOF.
	pseudo := strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/")
	sized := st.Mode().IsRegular() && st.Size() > 0 && !pseudo
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(filepath.Base(p)))
	h.Set("Last-Modified", st.ModTime().UTC().Format(http.TimeFormat))
	var src io.Reader = f
	if sized {
		h.Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		src = io.LimitReader(f, st.Size())
	}
	w.WriteHeader(200)
	if r.Method == http.MethodHead {
		return nil
	}
	buf := make([]byte, copyBuffer)
	if _, err := io.CopyBuffer(w, src, buf); err != nil {
		// the answer has started: only cutting the connection can tell the client
		panic(http.ErrAbortHandler)
	}
	return nil
}

type written struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func handleUpload(env *Env, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	u, err := authorizeFiles(env, r, q, "write")
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
		out, err = uploadMultipart(env, r, u, q, params["boundary"], meta)
	case "application/octet-stream":
		out, err = uploadOctetStream(env, r, u, q, meta)
	default:
		if ct == "" {
			ct = "(none)"
		}
		return httpErr(400, "unsupported content type '"+ct+"'")
	}
	if err != nil {
		// a body left unread would be parsed as the next request
		w.Header().Set("Connection", "close")
		return err
	}
	sendJSON(w, 200, out)
	return nil
}

func finish(target string, meta map[string]string) written {
	wr := written{Path: target, Name: filepath.Base(target), Type: "file"}
	if len(meta) > 0 {
		setMetadata(target, meta) // best effort: a filesystem without user xattrs
		wr.Metadata = meta
	}
	return wr
}

func uploadOctetStream(env *Env, r *http.Request, u *User, q url.Values, meta map[string]string) ([]written, error) {
	raw := q.Get("path")
	if raw == "" {
		return nil, httpErr(400, "query parameter 'path' is required for application/octet-stream uploads")
	}
	target := env.resolvePathFor(raw, u)
	var src io.Reader = r.Body
	switch strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))) {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, httpErr(400, "invalid compressed body: "+err.Error())
		}
		src = zr
	case "deflate":
		zr, err := zlib.NewReader(r.Body)
		if err != nil {
			return nil, httpErr(400, "invalid compressed body: "+err.Error())
		}
		src = zr
	default:
		return nil, httpErr(400, "unsupported content encoding '"+r.Header.Get("Content-Encoding")+"'")
	}
	if err := writeFileAtomic(target, src, u); err != nil {
		return nil, err
	}
	return []written{finish(target, meta)}, nil
}

// undici escapes `"`, CR and LF in multipart filenames.
func decodeFilename(name string) string {
	r := strings.NewReplacer("%22", `"`, "%0D", "\r", "%0d", "\r", "%0A", "\n", "%0a", "\n")
	return r.Replace(name)
}

func uploadMultipart(env *Env, r *http.Request, u *User, q url.Values, boundary string, meta map[string]string) ([]written, error) {
	if boundary == "" {
		return nil, httpErr(400, "invalid multipart request: no boundary")
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
			return nil, httpErr(400, "invalid multipart body: "+err.Error())
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
				return nil, httpErr(400, "invalid multipart body: "+err.Error())
			}
			if len(b) > textPartLimit {
				return nil, httpErr(413, "a 'file' part without a filename is limited to "+strconv.Itoa(textPartLimit)+" bytes; send it with a filename")
			}
			src = strings.NewReader(string(b))
		}
		given := queryPath
		if given == "" && filename != "" {
			given = decodeFilename(filename)
		}
		if given == "" {
			return nil, httpErr(400, "missing file path (part filename or query 'path')")
		}
		target := env.resolvePathFor(given, u)
		if seen[target] {
			return nil, httpErr(400, "duplicate path '"+target+"' in upload")
		}
		seen[target] = true
		if err := writeFileAtomic(target, src, u); err != nil {
			return nil, err
		}
		out = append(out, finish(target, meta))
	}
	if len(out) == 0 {
		return nil, httpErr(400, "no file parts in multipart body")
	}
	return out, nil
}

func tempNameFor(base string) string {
	var b [6]byte
	rand.Read(b[:])
	return "." + base + ".envd-" + hex.EncodeToString(b[:]) + ".tmp"
}

// chownIfRoot gives p to u when envd runs as root (best effort: foreign filesystems).
func chownIfRoot(p string, u *User) {
	if os.Geteuid() == 0 {
		os.Lchown(p, u.UID, u.GID)
	}
}

// mkdirpOwned creates dir and its missing parents, each owned by u.
func mkdirpOwned(dir string, u *User) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return syscall.ENOTDIR
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirpOwned(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if os.IsExist(err) {
			if st, e := os.Stat(dir); e == nil && st.IsDir() {
				return nil
			}
		}
		return err
	}
	chownIfRoot(dir, u)
	return nil
}

// finalTarget is where a write to target lands (a symlink is followed; a dangling one is
// replaced) and the mode of the file it replaces (-1 when new).
func finalTarget(target string, depth int) (string, os.FileMode, error) {
	st, err := os.Lstat(target)
	if err != nil {
		if os.IsNotExist(err) {
			return target, 0, nil
		}
		return "", 0, err
	}
	if st.Mode()&os.ModeSymlink != 0 && depth < 40 {
		real, err := filepath.EvalSymlinks(target)
		if err != nil {
			return target, 0, nil
		}
		return finalTarget(real, depth+1)
	}
	if st.IsDir() {
		return "", 0, httpErr(400, "path '"+target+"' is a directory")
	}
	return target, st.Mode().Perm() | st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) | 1<<31, nil
}

// writeFileAtomic writes src to a temp file beside target, then renames it over target: no
// half-written files. The file ends up owned by u; an existing file's mode is kept.
func writeFileAtomic(target string, src io.Reader, u *User) (err error) {
	if e := mkdirpOwned(filepath.Dir(target), u); e != nil {
		if n := errnoOf(e); n == syscall.EEXIST || n == syscall.ENOTDIR {
			return httpErr(400, "cannot create parent directory of '"+target+"': a path component is not a directory")
		}
		return fileWriteError(target, e)
	}
	dest, mode, e := finalTarget(target, 0)
	if e != nil {
		if _, ok := e.(*HTTPError); ok {
			return e
		}
		return fileWriteError(target, e)
	}
	perm := os.FileMode(0o644)
	keep := mode&(1<<31) != 0
	if keep {
		perm = mode &^ (1 << 31)
	}
	tmp := filepath.Join(filepath.Dir(dest), tempNameFor(filepath.Base(dest)))
	f, e := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm&os.ModePerm)
	if e != nil {
		return fileWriteError(target, e)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if e := copyLarge(f, src); e != nil {
		var pe *os.PathError
		if errors.As(e, &pe) {
			return fileWriteError(target, e)
		}
		if e == gzip.ErrChecksum || e == gzip.ErrHeader || e == zlib.ErrChecksum || e == zlib.ErrHeader || strings.Contains(e.Error(), "flate") {
			return httpErr(400, "invalid compressed body: "+e.Error())
		}
		return httpErr(400, "reading the upload: "+e.Error())
	}
	if e := f.Close(); e != nil {
		return fileWriteError(target, e)
	}
	if keep {
		os.Chmod(tmp, perm) // umask and setuid bits
	}
	chownIfRoot(tmp, u)
	if e := os.Rename(tmp, dest); e != nil {
		return fileWriteError(target, e)
	}
	return nil
}

func fileWriteError(target string, err error) error {
	status := statusForErrno(err)
	if status == 404 {
		status = 400
	}
	if status == 507 {
		return httpErr(507, "not enough disk space: "+err.Error())
	}
	return httpErr(status, "error writing '"+target+"': "+err.Error())
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
