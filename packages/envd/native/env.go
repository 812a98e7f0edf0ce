package main

import (
	"net"
	"sync"

	"aenv/envd/internal/connect"
	"aenv/envd/internal/filesystem"
	"aenv/envd/internal/metrics"
	"aenv/envd/internal/process"
	"aenv/envd/internal/state"
	"aenv/envd/internal/users"
)

// Env holds the services every handler shares.
type Env struct {
	State     *state.State
	Users     *users.DB
	Resolver  *users.Resolver
	Processes *process.Service
	Files     *filesystem.Service
	Metrics   *metrics.Sampler
	conns     *connSet
}

// resolveUser: "" → the default user; nil for an unknown name.
func (e *Env) resolveUser(name string) *users.User {
	u, _ := e.Resolver.User(name)
	return u
}

// rpcUser is the user an RPC acts as (Authorization: Basic base64("name:")).
func (e *Env) rpcUser(c *connect.Call) (*users.User, error) {
	u, name := e.Resolver.Caller(c.Header)
	if u == nil {
		return nil, connect.Errorf(connect.CodeUnauthenticated, "invalid username: '%s'", name)
	}
	return u, nil
}

// resolvePathFor resolves p for u with the sandbox's default workdir.
func (e *Env) resolvePathFor(p string, u *users.User) string {
	return e.Resolver.Path(p, u)
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
