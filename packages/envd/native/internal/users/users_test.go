package users

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func etc(t *testing.T, passwd, group string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestAccounts(t *testing.T) {
	db := NewDB(etc(t,
		"# comment\nuser:x:1000:1000::/home/user:\nuser:x:1001:1001::/elsewhere:/bin/sh\nbroken:x:a:1::/:/bin/sh\nnohome:x:1002:1002:::/bin/zsh\n",
		"users:x:100:\nuser:x:1000:\nother:x:1000:\n"))
	a := db.Accounts()
	if u := a.ByName["user"]; u == nil || u.UID != 1000 || u.Home != "/home/user" || u.Shell != "/bin/sh" {
		t.Fatalf("the first line of a name wins, an empty shell is /bin/sh: %+v", u)
	}
	if u := a.ByName["nohome"]; u == nil || u.Home != "/" {
		t.Fatalf("an empty home is /: %+v", u)
	}
	if a.ByName["broken"] != nil {
		t.Fatal("a line with a bad uid is skipped")
	}
	if r := a.ByName["root"]; r == nil || r.UID != 0 || a.ByUID[0] != r {
		t.Fatal("root always resolves")
	}
	if a.GroupByGID[1000] != "user" || a.GroupByGID[100] != "users" {
		t.Fatalf("groups: %v", a.GroupByGID)
	}
}

func TestResolver(t *testing.T) {
	withUser := NewDB(etc(t, "root:x:0:0::/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n", ""))
	rootOnly := NewDB(etc(t, "root:x:0:0::/root:/bin/bash\n", ""))
	defaultUser, workdir := "", ""
	defaults := func() (string, string) { return defaultUser, workdir }
	r := &Resolver{DB: withUser, Defaults: defaults}
	if u, name := r.User(""); u == nil || name != "user" {
		t.Fatalf("no default set: `user` when it exists (%v %q)", u, name)
	}
	if u, name := (&Resolver{DB: rootOnly, Defaults: defaults}).User(""); u == nil || name != "root" {
		t.Fatalf("else root (%v %q)", u, name)
	}
	defaultUser = "nobody"
	if u, name := r.User(""); u != nil || name != "nobody" {
		t.Fatalf("a configured default that does not exist: %v %q", u, name)
	}
	defaultUser = ""
	h := http.Header{"Authorization": {"Basic cm9vdDo="}} // root:
	if u, _ := r.Caller(h); u == nil || u.Name != "root" {
		t.Fatalf("Basic root: %v", u)
	}
	if u, name := r.Caller(http.Header{"Authorization": {"Bearer x"}}); u == nil || name != "user" {
		t.Fatalf("no Basic credentials: the default user (%v %q)", u, name)
	}
	user, _ := r.User("user")
	workdir = "/work/dir/"
	for p, want := range map[string]string{
		"":         "/work/dir",
		"~":        "/home/user",
		"~/a/../b": "/home/user/b",
		"rel/x":    "/home/user/rel/x",
		"/abs/./y": "/abs/y",
	} {
		if got := r.Path(p, user); got != want {
			t.Errorf("%q: %q, want %q", p, got, want)
		}
	}
	workdir = ""
	if got := r.Path("", user); got != "/home/user" {
		t.Errorf("no workdir: %q", got)
	}
}

func TestUsernameFromBasicAuth(t *testing.T) {
	for h, want := range map[string]string{
		"Basic dXNlcjo=":    "user", // "user:"
		"basic   dXNlcjo  ": "user", // unpadded, any case and spacing
		"Basic dXNlcg==":    "user", // no colon
		"Basic !!!":         "",
		"Bearer dXNlcjo=":   "",
		"":                  "",
	} {
		if got := usernameFromBasicAuth(h); got != want {
			t.Errorf("%q: %q, want %q", h, got, want)
		}
	}
}
