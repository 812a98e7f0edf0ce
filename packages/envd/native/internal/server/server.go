// Package server is envd's HTTP server: the Connect services (process, filesystem) and the
// plain routes (routes.go), behind one token check, with the connections it keeps track of
// for /quiesce (quiesce.go).
package server

import (
	"context"
	"log"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"aenv/envd/internal/auth"
	"aenv/envd/internal/connect"
	"aenv/envd/internal/filesystem"
	"aenv/envd/internal/metrics"
	"aenv/envd/internal/process"
	"aenv/envd/internal/respond"
	"aenv/envd/internal/state"
	"aenv/envd/internal/users"
)

type ctxKey int

const connKey ctxKey = 0

// Config is what the server serves and reads.
type Config struct {
	// Port is envd's own: /quiesce tells the connections to it from the others.
	Port int
	// Debug logs every request with its duration.
	Debug bool
	// State is what POST /init sets.
	State *state.State
	// Accounts are the sandbox's users (POST /init warns of a default user that is not one).
	Accounts  *users.DB
	Files     *filesystem.Service
	Processes *process.Service
}

type server struct {
	Config
	conns   *connSet
	metrics *metrics.Sampler
}

// New is envd's HTTP server: the Connect services, then the plain routes (routes.go).
func New(cfg Config) *http.Server {
	s := &server{Config: cfg, conns: &connSet{m: map[net.Conn]struct{}{}}, metrics: &metrics.Sampler{}}
	rt := connect.NewRoutes()
	s.Processes.Register(rt)
	s.Files.Register(rt)
	// Connect calls are refused as Connect errors; the plain routes answer 401 (requireToken).
	checkCaller := func(r *http.Request) *connect.Error {
		if msg := auth.CheckToken(s.State.Token(), r.Header.Get("X-Access-Token")); msg != "" {
			return connect.Errorf(connect.CodeUnauthenticated, "%s", msg)
		}
		return nil
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Printf("panic in %s %s: %v\n%s", r.Method, r.URL.Path, p, debug.Stack())
				respond.Fail(w, 500, "internal error")
			}
			if s.Debug {
				log.Printf("%s %s %s", r.Method, r.URL.Path, time.Since(started))
			}
		}()
		if rt.Serve(w, r, checkCaller) {
			return
		}
		if err := s.route(w, r); err != nil {
			status, msg := 500, err.Error()
			if he, ok := err.(*respond.Error); ok {
				status = he.Status
			}
			if status >= 500 {
				log.Printf("%s %s failed: %v", r.Method, r.URL.Path, err)
			}
			respond.Fail(w, status, msg)
		}
	})
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 76 * time.Second,
		IdleTimeout:       75 * time.Second, // outlive the proxy's idle sockets
		MaxHeaderBytes:    64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey, c)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.conns.add(c)
			case http.StateClosed, http.StateHijacked:
				s.conns.remove(c)
			}
		},
		ErrorLog: log.New(os.Stderr, "envd http: ", 0),
	}
}

// fromLoopback: the request came from a process in the sandbox, over 127.0.0.1 or ::1.
func fromLoopback(r *http.Request) bool {
	c, ok := r.Context().Value(connKey).(net.Conn)
	if !ok {
		return false
	}
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// requireToken: the request carries the access token (when one is set), else 401.
func (s *server) requireToken(r *http.Request) error {
	if msg := auth.CheckToken(s.State.Token(), r.Header.Get("X-Access-Token")); msg != "" {
		return respond.Err(401, msg)
	}
	return nil
}
