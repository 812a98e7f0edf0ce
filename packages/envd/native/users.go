package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// User is a Linux account from the sandbox's /etc/passwd.
type User struct {
	Name  string
	UID   int
	GID   int
	Home  string
	Shell string
}

type Accounts struct {
	ByName     map[string]*User
	ByUID      map[int]*User
	GroupByGID map[int]string
}

// UserDb reads /etc/passwd and /etc/group, at most once a second.
type UserDb struct {
	etcDir string
	mu     sync.Mutex
	cached *Accounts
	at     time.Time
}

func newUserDb(etcDir string) *UserDb { return &UserDb{etcDir: etcDir} }

func (db *UserDb) Accounts() *Accounts {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.cached != nil && time.Since(db.at) < time.Second {
		return db.cached
	}
	a := &Accounts{ByName: map[string]*User{}, ByUID: map[int]*User{}, GroupByGID: map[int]string{}}
	passwd, _ := os.ReadFile(filepath.Join(db.etcDir, "passwd"))
	for _, line := range strings.Split(string(passwd), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 7 || f[0] == "" {
			continue
		}
		uid, e1 := strconv.Atoi(f[2])
		gid, e2 := strconv.Atoi(f[3])
		if e1 != nil || e2 != nil {
			continue
		}
		u := &User{Name: f[0], UID: uid, GID: gid, Home: f[5], Shell: f[6]}
		if u.Home == "" {
			u.Home = "/"
		}
		if u.Shell == "" {
			u.Shell = "/bin/sh"
		}
		if _, ok := a.ByName[u.Name]; !ok {
			a.ByName[u.Name] = u
		}
		if _, ok := a.ByUID[uid]; !ok {
			a.ByUID[uid] = u
		}
	}
	// root always resolves, even with a broken /etc/passwd
	if _, ok := a.ByName["root"]; !ok {
		root := &User{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/sh"}
		a.ByName["root"] = root
		if _, ok := a.ByUID[0]; !ok {
			a.ByUID[0] = root
		}
	}
	group, _ := os.ReadFile(filepath.Join(db.etcDir, "group"))
	for _, line := range strings.Split(string(group), "\n") {
		f := strings.Split(line, ":")
		if line == "" || strings.HasPrefix(line, "#") || len(f) < 3 || f[0] == "" {
			continue
		}
		if gid, err := strconv.Atoi(f[2]); err == nil {
			if _, ok := a.GroupByGID[gid]; !ok {
				a.GroupByGID[gid] = f[0]
			}
		}
	}
	db.cached, db.at = a, time.Now()
	return a
}

func (db *UserDb) Lookup(name string) *User { return db.Accounts().ByName[name] }

// DefaultUserName is the configured default user, else `user` if it exists, else `root`.
func (db *UserDb) DefaultUserName(configured string) string {
	if configured != "" {
		return configured
	}
	if db.Lookup("user") != nil {
		return "user"
	}
	return "root"
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

// resolvePath: "" → default workdir or home, "~" → home, relative → under home.
func resolvePath(p string, u *User, defaultWorkdir string) string {
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
