package sudo

// The cases of test/sudo-xattr.test.ts ("sudo and su"), against the Go port.

import (
	"reflect"
	"strings"
	"testing"

	"aenv/envd/internal/users"
)

var sudoTestRoot = &users.User{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash"}

var sudoTestCaller = sudoCaller{
	Env:  map[string]string{"FOO": "bar", "HOME": "/home/user", "PATH": "/x", "TERM": "xterm"},
	Name: "user", UID: "1000", GID: "1000",
}

func mustParseSudo(t *testing.T, args ...string) *sudoRequest {
	t.Helper()
	r, err := parseSudo(args, "user")
	if err != nil {
		t.Fatalf("parseSudo(%q): %v", args, err)
	}
	return r
}

func TestSudoOptions(t *testing.T) {
	r := mustParseSudo(t, "-n", "-E", "--", "id", "-u")
	want := &sudoRequest{Kind: "run", User: "root", Argv: []string{"id", "-u"}, PreserveEnv: true}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v want %+v", r, want)
	}
	c := sudoCommandFor(mustParseSudo(t, "whoami"), sudoTestRoot, sudoTestCaller)
	if c.File != "whoami" || len(c.Args) != 0 {
		t.Fatalf("command %q %q", c.File, c.Args)
	}
	if _, ok := c.Env["FOO"]; ok {
		t.Fatal("env reset")
	}
	if c.Env["TERM"] != "xterm" || c.Env["HOME"] != "/root" || c.Env["SUDO_USER"] != "user" ||
		!strings.Contains(c.Env["PATH"], "/usr/sbin") {
		t.Fatalf("env %v", c.Env)
	}
	if e := sudoCommandFor(mustParseSudo(t, "-E", "env"), sudoTestRoot, sudoTestCaller); e.Env["FOO"] != "bar" ||
		e.Env["HOME"] != "/home/user" {
		t.Fatalf("-E keeps the environment: %v", e.Env)
	}
	u := mustParseSudo(t, "-u", "nobody", "-i", "pwd")
	want = &sudoRequest{Kind: "run", User: "nobody", Argv: []string{"pwd"}, Shell: true, Login: true}
	if !reflect.DeepEqual(u, want) {
		t.Fatalf("got %+v want %+v", u, want)
	}
	if r := mustParseSudo(t, "-iu", "nobody"); r.Kind != "run" || r.User != "nobody" || !r.Login || len(r.Argv) != 0 {
		t.Fatalf("-iu nobody: %+v", r)
	}
	sh := sudoCommandFor(mustParseSudo(t, "-s", "echo", "a"), sudoTestRoot, sudoTestCaller)
	if sh.File != "/bin/bash" || !reflect.DeepEqual(sh.Args, []string{"-c", "echo a"}) {
		t.Fatalf("-s: %q %q", sh.File, sh.Args)
	}
	if l := mustParseSudo(t, "-l"); l.Kind != "print" || !strings.Contains(l.Text, "NOPASSWD: ALL") {
		t.Fatalf("-l: %+v", l)
	}
	if _, err := parseSudo(nil, "user"); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("no command: %v", err)
	}
	if _, err := parseSudo([]string{"-Z", "x"}, "user"); err == nil || !strings.Contains(err.Error(), "invalid option") {
		t.Fatalf("-Z: %v", err)
	}
	// --preserve-env=LIST keeps those besides env_keep; --user=NAME; -k alone prints nothing
	p := mustParseSudo(t, "--preserve-env=FOO,NOPE", "--user=nobody", "env")
	if p.User != "nobody" || p.PreserveEnv || !reflect.DeepEqual(p.PreserveList, []string{"FOO", "NOPE"}) {
		t.Fatalf("long options: %+v", p)
	}
	if pe := sudoCommandFor(p, sudoTestRoot, sudoTestCaller); pe.Env["FOO"] != "bar" || pe.Env["HOME"] != "/root" {
		t.Fatalf("--preserve-env=FOO: %v", pe.Env)
	}
	if k := mustParseSudo(t, "-k"); k.Kind != "print" || k.Text != "" {
		t.Fatalf("-k: %+v", k)
	}
	if _, err := parseSudo([]string{"-u"}, "user"); err == nil || err.Error() != "option requires an argument -- 'u'" {
		t.Fatalf("-u: %v", err)
	}
}

func TestSuOptions(t *testing.T) {
	r, err := parseSu([]string{"-c", "whoami"})
	want := &sudoRequest{Kind: "run", User: "root", Argv: []string{"whoami"}, Shell: true, PreserveEnv: true}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v %v want %+v", r, err, want)
	}
	l, err := parseSu([]string{"-", "user", "-c", "pwd"})
	if err != nil || l.User != "user" || !l.Login || l.PreserveEnv {
		t.Fatalf("su - user -c pwd: %+v %v", l, err)
	}
	c := sudoCommandFor(l, &users.User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user", Shell: "/bin/bash"}, sudoTestCaller)
	if c.File != "/bin/bash" || !reflect.DeepEqual(c.Args, []string{"-l", "-c", "pwd"}) || c.Env["HOME"] != "/home/user" {
		t.Fatalf("su - user: %q %q %v", c.File, c.Args, c.Env)
	}
	if _, err := parseSu([]string{"-x"}); err == nil || err.Error() != "invalid option -- 'x'" {
		t.Fatalf("-x: %v", err)
	}
}

func TestSudoDecodeRequest(t *testing.T) {
	b := []byte(strings.Join([]string{"sudo", "/tmp", "2", "id", "-u", "A=1", "B=x=y", ""}, "\x00"))
	r, err := decodeSudoRequest(b)
	want := &sudoWire{Tool: "sudo", Cwd: "/tmp", Args: []string{"id", "-u"}, Env: map[string]string{"A": "1", "B": "x=y"}}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v %v", r, err)
	}
	for _, bad := range [][]string{{"rm", "/", "0", ""}, {"sudo", "/", "9", "a", ""}, {"sudo", "/", "1.5", "a", ""}, {"sudo"}} {
		if _, err := decodeSudoRequest([]byte(strings.Join(bad, "\x00"))); err == nil || err.Error() != "malformed request" {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	// Number() of the count: "" is 0, " 1 " and "0x1" are 1
	for _, count := range []string{"", " 1 ", "0x1", "1e0"} {
		if _, err := decodeSudoRequest([]byte("su\x00/\x00" + count + "\x00a\x00")); err != nil {
			t.Fatalf("count %q: %v", count, err)
		}
	}
}
