package main

import (
	"net"
	"sync"

	"aenv/envd/internal/connect"
)

// Env holds the services every handler shares.
type Env struct {
	State     *State
	Users     *UserDb
	Processes *ProcessManager
	Watchers  *WatcherRegistry
	conns     *connSet
}

// resolveUser: "" → the default user; nil for an unknown name.
func (e *Env) resolveUser(name string) *User {
	if name == "" {
		du, _ := e.State.Defaults()
		name = e.Users.DefaultUserName(du)
	}
	return e.Users.Lookup(name)
}

// rpcUser is the user an RPC acts as (Authorization: Basic base64("name:")).
func (e *Env) rpcUser(c *connect.Call) (*User, error) {
	requested := usernameFromBasicAuth(c.Header.Get("Authorization"))
	u := e.resolveUser(requested)
	if u == nil {
		if requested == "" {
			du, _ := e.State.Defaults()
			requested = e.Users.DefaultUserName(du)
		}
		return nil, connect.Errorf(connect.CodeUnauthenticated, "invalid username: '%s'", requested)
	}
	return u, nil
}

// resolvePathFor resolves p for u with the sandbox's default workdir.
func (e *Env) resolvePathFor(p string, u *User) string {
	_, wd := e.State.Defaults()
	return resolvePath(p, u, wd)
}

// connSet tracks open client connections (quiesce closes them).
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	s.m[c] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// closeAllBut closes every tracked connection except `keep`.
func (s *connSet) closeAllBut(keep net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		if c != keep {
			c.Close()
			delete(s.m, c)
		}
	}
}
