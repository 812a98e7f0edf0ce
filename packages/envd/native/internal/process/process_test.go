package process

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"aenv/envd/internal/connect"
	pb "aenv/envd/internal/gen/process"
	"aenv/envd/internal/users"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestProcessEnv(t *testing.T) {
	t.Setenv("PATH", "/envd/path")
	u := &users.User{Name: "user", Home: "/home/user"}
	env := buildProcessEnv(u, map[string]string{"Z": "1", "HOME": "/sandbox", "A": "2"}, map[string]string{"A": "3", "B": "4"})
	// envd's own PATH, the user's names, then the sandbox's and the request's vars by name; a
	// later value replaces an earlier one in place.
	want := "PATH=/envd/path HOME=/sandbox USER=user LOGNAME=user A=3 Z=1 B=4"
	if got := strings.Join(env.strings(), " "); got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"a/tool": 0o755, "b/tool": 0o755, "a/plain": 0o644} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	env := envMap{{"PATH", filepath.Join(dir, "a") + ":" + filepath.Join(dir, "b")}}
	if p, err := lookPath("tool", env, "/"); err != nil || p != filepath.Join(dir, "a/tool") {
		t.Fatalf("the first on the child's PATH: %q %v", p, err)
	}
	if p, err := lookPath("./x/y", env, "/"); err != nil || p != "./x/y" {
		t.Fatalf("a name with a slash is as given: %q %v", p, err)
	}
	if _, err := lookPath("plain", env, "/"); err != syscall.EACCES {
		t.Fatalf("only a file that is not executable: %v", err)
	}
	if _, err := lookPath("nope", env, "/"); err != syscall.ENOENT {
		t.Fatalf("nothing: %v", err)
	}
	if got := spawnError("nope", syscall.ENOENT); got != "spawn nope ENOENT" {
		t.Fatalf("worded as Node's spawn: %q", got)
	}
}

// service runs commands as the test's own account, named `user`.
func service(t *testing.T) *connect.Routes {
	t.Helper()
	etc := t.TempDir()
	passwd := "user:x:" + strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid()) + "::" + t.TempDir() + ":/bin/sh\n"
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	res := &users.Resolver{DB: users.NewDB(etc), Defaults: func() (string, string) { return "user", "" }}
	s := New(Config{Users: res, EnvVars: func() map[string]string { return map[string]string{"FROM_INIT": "yes"} }})
	rt := connect.NewRoutes()
	s.Register(rt)
	return rt
}

func envelope(payload string) []byte {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// stream calls a server-streaming procedure with a JSON request and answers its events and
// its end (the last envelope's JSON).
func stream(t *testing.T, rt *connect.Routes, method, req string) ([]*pb.ProcessEvent, string) {
	t.Helper()
	r := httptest.NewRequest("POST", "/process.Process/"+method, bytes.NewReader(envelope(req)))
	r.Header.Set("Content-Type", "application/connect+json")
	w := httptest.NewRecorder()
	rt.Serve(w, r, func(*http.Request) *connect.Error { return nil })
	var events []*pb.ProcessEvent
	b := w.Body.Bytes()
	for len(b) >= 5 {
		n := binary.BigEndian.Uint32(b[1:5])
		flags, payload := b[0], b[5:5+n]
		b = b[5+n:]
		if flags&2 != 0 {
			return events, string(payload)
		}
		res := &pb.StartResponse{} // ConnectResponse has the same shape
		if err := protojson.Unmarshal(payload, res); err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		events = append(events, res.GetEvent())
	}
	t.Fatalf("no end of stream in %q", w.Body.String())
	return nil, ""
}

func TestStartAndConnect(t *testing.T) {
	rt := service(t)
	events, end := stream(t, rt, "Start", `{"process":{"cmd":"/bin/sh","args":["-c","echo $FROM_INIT; echo err >&2; exit 3"]}}`)
	if end != "{}" || len(events) < 3 {
		t.Fatalf("%v %s", events, end)
	}
	pid := events[0].GetStart().GetPid()
	var stdout, stderr string
	for _, ev := range events[1 : len(events)-1] {
		stdout += string(ev.GetData().GetStdout())
		stderr += string(ev.GetData().GetStderr())
	}
	last := events[len(events)-1].GetEnd()
	if pid == 0 || stdout != "yes\n" || stderr != "err\n" || last.GetExitCode() != 3 || !last.GetExited() ||
		last.GetStatus() != "exit status 3" || last.GetError() != "exit status 3" {
		t.Fatalf("pid %d stdout %q stderr %q end %v", pid, stdout, stderr, last)
	}
	// A finished process still answers Connect with its end.
	sel := `{"process":{"pid":` + strconv.Itoa(int(pid)) + `}}`
	events, end = stream(t, rt, "Connect", sel)
	if end != "{}" || len(events) != 2 || events[0].GetStart().GetPid() != pid || events[1].GetEnd().GetExitCode() != 3 {
		t.Fatalf("connect: %v %s", events, end)
	}
	// ...but is not running.
	r := httptest.NewRequest("POST", "/process.Process/SendSignal", strings.NewReader(`{"process":{"pid":`+strconv.Itoa(int(pid))+`},"signal":"SIGNAL_SIGKILL"}`))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	rt.Serve(w, r, func(*http.Request) *connect.Error { return nil })
	if w.Code != 404 || !strings.Contains(w.Body.String(), `"message":"process with pid `+strconv.Itoa(int(pid))+` not found"`) {
		t.Fatalf("signal: %d %s", w.Code, w.Body.String())
	}
	_, end = stream(t, rt, "Start", `{"process":{"cmd":"/nope"}}`)
	if end != `{"error":{"code":"internal","message":"error starting process '/nope': spawn /nope ENOENT"}}` {
		t.Fatalf("a command that does not exist: %s", end)
	}
}
