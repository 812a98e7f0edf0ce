// Package users reads the sandbox's accounts (/etc/passwd, /etc/group) and answers who a
// request acts as and where its paths point.
package users

import (
	"os"
	"path/filepath"
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

// Accounts are the accounts and groups as last read.
type Accounts struct {
	ByName     map[string]*User
	ByUID      map[int]*User
	GroupByGID map[int]string
}

// DB reads /etc/passwd and /etc/group, at most once a second.
type DB struct {
	etcDir string
	mu     sync.Mutex
	cached *Accounts
	at     time.Time
}

// NewDB reads the files in etcDir.
func NewDB(etcDir string) *DB { return &DB{etcDir: etcDir} }

// Accounts are the files' accounts, read again when the last read is a second old.
func (db *DB) Accounts() *Accounts {
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

// Lookup is the account named name, or nil.
func (db *DB) Lookup(name string) *User { return db.Accounts().ByName[name] }

// DefaultUserName is the configured default user, else `user` if it exists, else `root`.
func (db *DB) DefaultUserName(configured string) string {
	if configured != "" {
		return configured
	}
	if db.Lookup("user") != nil {
		return "user"
	}
	return "root"
}
