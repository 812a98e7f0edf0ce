package filesystem

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"aenv/envd/internal/connect"
	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/respond"
	"aenv/envd/internal/users"
)

// testService serves a home folder for `user` (the default user) with a file f in it.
func testService(t *testing.T, token string) (*Service, *connect.Routes, string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	etc := filepath.Join(dir, "etc")
	for _, d := range []string{home, etc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	passwd := "root:x:0:0::/root:/bin/sh\nuser:x:" + strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid()) + "::" + home + ":/bin/sh\n"
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := &users.Resolver{DB: users.NewDB(etc), Defaults: func() (string, string) { return "", "" }}
	s := New(Config{Users: res, Token: func() string { return token }})
	rt := connect.NewRoutes()
	s.Register(rt)
	return s, rt, home
}

// rpc makes a unary JSON call as user ("" = no Authorization header).
func rpc(rt *connect.Routes, method, user, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/filesystem.Filesystem/"+method, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if user != "" {
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	w := httptest.NewRecorder()
	rt.Serve(w, r, func(*http.Request) *connect.Error { return nil })
	return w
}

// Every path-naming call goes through onPath: the same decoding, caller, resolution and
// error mapping whichever procedure it is.
func TestPathCalls(t *testing.T) {
	_, rt, home := testService(t, "")
	for _, c := range []struct {
		method, user, body string
		status             int
		answer             string
	}{
		{"Stat", "", `{"path":"f"}`, 200, `"path":"` + home + `/f"`},
		{"Stat", "user", `{"path":"~/f"}`, 200, `"name":"f"`},
		{"Stat", "root", `{"path":"` + home + `/f"}`, 200, `"size":"4"`},
		{"Stat", "", `{"path":"missing"}`, 404, `{"code":"not_found","message":"path '` + home + `/missing' does not exist"}`},
		{"Stat", "nobody", `{"path":"f"}`, 401, `{"code":"unauthenticated","message":"invalid username: 'nobody'"}`},
		{"Stat", "", `{"path":1}`, 400, `"code":"invalid_argument","message":"invalid request message:`},
		{"ListDir", "", `{"path":"f"}`, 400, `"message":"path '` + home + `/f' is not a directory"`},
		{"ListDir", "", `{"path":"f/g"}`, 400, `"message":"path '` + home + `/f/g' is not a directory: ENOTDIR: not a directory, stat '` + home + `/f/g'"`},
		{"ListDir", "", `{}`, 200, `"name":"f"`},
		{"MakeDir", "", `{"path":"f"}`, 400, `"message":"path '` + home + `/f' already exists but it is not a directory"`},
		{"MakeDir", "", `{"path":"f/sub"}`, 400, `"code":"invalid_argument","message":"path '` + home + `/f/sub' is not a directory: ENOTDIR`},
		{"MakeDir", "", `{"path":"d/e"}`, 200, `"path":"` + home + `/d/e"`},
		{"MakeDir", "", `{"path":"d/e"}`, 409, `"code":"already_exists"`},
		{"Remove", "", `{"path":"missing"}`, 200, `{}`},
		{"Remove", "", `{"path":"d"}`, 200, `{}`},
		{"CreateWatcher", "", `{"path":"f"}`, 400, `"message":"path '` + home + `/f' is not a directory"`},
		{"Move", "", `{"source":"missing","destination":"x"}`, 404, `"message":"path '` + home + `/missing' does not exist"`},
		{"Move", "", `{"source":"f","destination":"f/x"}`, 409, `{"code":"already_exists","message":"path '` + home + `/f/x' already exists"}`},
		{"Move", "nobody", `{"source":"f","destination":"g"}`, 401, `"invalid username: 'nobody'"`},
		{"GetWatcherEvents", "nobody", `{"watcherId":"w"}`, 404, `{"code":"not_found","message":"watcher with id w not found"}`},
	} {
		w := rpc(rt, c.method, c.user, c.body)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.answer) {
			t.Errorf("%s %s as %q: %d %s\nwant %d %s", c.method, c.body, c.user, w.Code, w.Body.String(), c.status, c.answer)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "d")); !os.IsNotExist(err) {
		t.Fatal("Remove left the folder")
	}
}

func TestRPCError(t *testing.T) {
	wrapped := func(n syscall.Errno) error { return &nodefs.Error{Errno: n, Call: "open", Path: "/p"} }
	for _, c := range []struct {
		err        error
		code, want string
	}{
		{wrapped(syscall.ENOENT), connect.CodeNotFound, "path '/p' does not exist"},
		{wrapped(syscall.EISDIR), connect.CodeInvalidArgument, "path '/p' is a directory"},
		{wrapped(syscall.EEXIST), connect.CodeAlreadyExists, "path '/p' already exists"},
		{wrapped(syscall.EACCES), connect.CodePermissionDenied, "permission denied for '/p': EACCES: permission denied, open '/p'"},
		{wrapped(syscall.EROFS), connect.CodePermissionDenied, "permission denied for '/p': EROFS: read-only file system, open '/p'"},
		{wrapped(syscall.EDQUOT), connect.CodeResourceExhausted, "not enough disk space: EDQUOT: disk quota exceeded, open '/p'"},
		{wrapped(syscall.ELOOP), connect.CodeInvalidArgument, "invalid path '/p': ELOOP: too many symbolic links encountered, open '/p'"},
		{wrapped(syscall.EIO), connect.CodeInternal, "error on '/p': EIO: i/o error, open '/p'"},
		{errors.New("plain"), connect.CodeInternal, "error on '/p': plain"},
		{connect.Errorf(connect.CodeAborted, "kept"), connect.CodeAborted, "kept"},
	} {
		e, ok := rpcError(c.err, "/p").(*connect.Error)
		if !ok || e.Code != c.code || e.Message != c.want {
			t.Errorf("%v: %v, want %s %q", c.err, e, c.code, c.want)
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	status := func(err error) (int, string) {
		e := err.(*respond.Error)
		return e.Status, e.Message
	}
	if s, m := status(openError("/p", syscall.ENOENT)); s != 404 || m != "path '/p' does not exist" {
		t.Errorf("open ENOENT: %d %q", s, m)
	}
	if s, m := status(openError("/p", &os.PathError{Op: "open", Path: "/p", Err: syscall.EACCES})); s != 403 || m != "cannot open '/p': open /p: permission denied" {
		t.Errorf("open EACCES: %d %q", s, m)
	}
	if s, _ := status(writeError("/p", syscall.ENOENT)); s != 400 {
		t.Errorf("a write's ENOENT is the request's fault: %d", s)
	}
	if s, m := status(writeError("/p", syscall.ENOSPC)); s != 507 || m != "not enough disk space: no space left on device" {
		t.Errorf("write ENOSPC: %d %q", s, m)
	}
	if s, m := status(writeError("/p", syscall.EROFS)); s != 403 || m != "error writing '/p': read-only file system" {
		t.Errorf("write EROFS: %d %q", s, m)
	}
}

func TestFilesCaller(t *testing.T) {
	s, _, home := testService(t, "tok")
	call := func(url, token string) (*users.User, error) {
		r := httptest.NewRequest("GET", url, nil)
		if token != "" {
			r.Header.Set("X-Access-Token", token)
		}
		return s.filesCaller(r, r.URL.Query(), "read")
	}
	if _, err := call("/files?path=f", ""); err == nil || err.(*respond.Error).Status != 401 ||
		err.Error() != "unauthorized access, missing access token or signature" {
		t.Fatalf("no credentials: %v", err)
	}
	if _, err := call("/files?path=f&username=nobody", "tok"); err == nil || err.Error() != "invalid username: 'nobody'" {
		t.Fatalf("unknown user: %v", err)
	}
	if u, err := call("/files?path=f", "tok"); err != nil || u.Home != home {
		t.Fatalf("the default user: %v %v", u, err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/files?path=f", nil)
	r.Header.Set("X-Access-Token", "tok")
	if err := s.Download(w, r); err != nil || w.Body.String() != "data" || w.Header().Get("Content-Length") != "4" {
		t.Fatalf("download: %v %q", err, w.Body.String())
	}
	r = httptest.NewRequest("GET", "/files?path=missing", nil)
	r.Header.Set("X-Access-Token", "tok")
	if err := s.Download(httptest.NewRecorder(), r); err == nil || err.(*respond.Error).Status != 404 {
		t.Fatalf("a missing file: %v", err)
	}
}
