package users

import (
	"encoding/base64"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
)

// Resolver answers who a request acts as and where its paths point: the accounts, and the
// sandbox's default user and workdir (what POST /init last set).
type Resolver struct {
	DB       *DB
	Defaults func() (user, workdir string)
}

// User is the account name names ("" = the default user), or nil; and the name looked up.
func (r *Resolver) User(name string) (*User, string) {
	if name == "" {
		du, _ := r.Defaults()
		name = r.DB.DefaultUserName(du)
	}
	return r.DB.Lookup(name), name
}

// Caller is the account a Connect call's `Authorization: Basic base64("name:")` names (the
// default user without one), or nil; and the name looked up.
func (r *Resolver) Caller(h http.Header) (*User, string) {
	return r.User(usernameFromBasicAuth(h.Get("Authorization")))
}

// Path resolves p for u against the default workdir (ResolvePath).
func (r *Resolver) Path(p string, u *User) string {
	return ResolvePath(p, u, r.Workdir())
}

// Workdir is the sandbox's default workdir ("" for none).
func (r *Resolver) Workdir() string {
	_, wd := r.Defaults()
	return wd
}

var basicAuthRe = regexp.MustCompile(`(?i)^\s*basic\s+(\S+)\s*$`)

// usernameFromBasicAuth: `Authorization: Basic base64("name:")`; "" when absent or empty.
func usernameFromBasicAuth(h string) string {
	m := basicAuthRe.FindStringSubmatch(h)
	if m == nil {
		return ""
	}
	dec, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		dec, err = base64.RawStdEncoding.DecodeString(m[1])
		if err != nil {
			return ""
		}
	}
	s := string(dec)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return s
}

// ResolvePath: "" → defaultWorkdir or home, "~" → home, relative → under home.
func ResolvePath(p string, u *User, defaultWorkdir string) string {
	home := u.Home
	if home == "" {
		home = "/"
	}
	switch {
	case p == "":
		if defaultWorkdir != "" {
			return filepath.Clean(defaultWorkdir)
		}
		return filepath.Clean(home)
	case p == "~":
		return filepath.Clean(home)
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	default:
		return filepath.Join(home, p)
	}
}
