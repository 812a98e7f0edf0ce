package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"aenv/envd/internal/auth"
	"aenv/envd/internal/connect"
	"aenv/envd/internal/fslayer"
	"aenv/envd/internal/respond"
	"aenv/envd/internal/state"
	"aenv/envd/internal/sudo"
)

// The host's own routes (see @aenv/protocol's envd-http.ts).
const (
	accessCheck    = "/access/check"
	quiescePath    = "/quiesce"
	heapReducePath = "/heap/reduce"
	fsLayerCapture = "/fs-layer/capture"
	fsLayerApply   = "/fs-layer/apply"
)

type ctxKey int

const connKey ctxKey = 0

func newHTTPServer(env *Env, port int) *http.Server {
	rt := connect.NewRoutes()
	env.Processes.Register(rt)
	env.Files.Register(rt)
	auth := func(r *http.Request) *connect.Error {
		if msg := auth.CheckToken(env.State.Token(), r.Header.Get("X-Access-Token")); msg != "" {
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
			if debugLog {
				log.Printf("%s %s %s", r.Method, r.URL.Path, time.Since(started))
			}
		}()
		if rt.Serve(w, r, auth) {
			return
		}
		if err := route(env, port, w, r); err != nil {
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
		ConnState: func(c net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				env.conns.add(c)
			case http.StateClosed, http.StateHijacked:
				env.conns.remove(c)
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

func requireToken(env *Env, r *http.Request) error {
	if msg := auth.CheckToken(env.State.Token(), r.Header.Get("X-Access-Token")); msg != "" {
		return respond.Err(401, msg)
	}
	return nil
}

func route(env *Env, port int, w http.ResponseWriter, r *http.Request) error {
	switch r.URL.Path {
	case "/health":
		if err := respond.MethodIs(r, "GET", "HEAD"); err != nil {
			return err
		}
		w.WriteHeader(204)
		return nil
	case "/init":
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		return handleInit(env, w, r)
	case "/envs":
		if err := respond.MethodIs(r, "GET"); err != nil {
			return err
		}
		// Processes in the sandbox may read them without the token (the code interpreter loads
		// them into its kernels; every command envd starts has them in its environment anyway).
		// The host's requests never come from loopback: they reach envd on the slot address.
		if !sudo.InSandbox() || !fromLoopback(r) {
			if err := requireToken(env, r); err != nil {
				return err
			}
		}
		respond.JSON(w, 200, env.State.EnvVars())
		return nil
	case "/metrics":
		if err := respond.MethodIs(r, "GET"); err != nil {
			return err
		}
		if err := requireToken(env, r); err != nil {
			return err
		}
		respond.JSON(w, 200, env.Metrics.Collect())
		return nil
	case accessCheck:
		// Our services inside the sandbox ask this for each caller: the same check as every
		// other route here, against the token as it is now.
		if err := respond.MethodIs(r, "GET"); err != nil {
			return err
		}
		if err := requireToken(env, r); err != nil {
			return err
		}
		w.WriteHeader(204)
		return nil
	case quiescePath:
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := requireToken(env, r); err != nil {
			return err
		}
		return handleQuiesce(env, port, w, r)
	case heapReducePath:
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := requireToken(env, r); err != nil {
			return err
		}
		debug.FreeOSMemory()
		w.WriteHeader(204)
		return nil
	case fsLayerCapture, fsLayerApply:
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := requireToken(env, r); err != nil {
			return err
		}
		return fslayer.Serve(w, r, r.URL.Path == fsLayerCapture)
	case "/files/compose":
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := requireToken(env, r); err != nil {
			return err
		}
		return env.Files.Compose(w, r)
	case "/files":
		switch r.Method {
		case "GET":
			return env.Files.Download(w, r)
		case "POST":
			return env.Files.Upload(w, r)
		}
		return respond.Err(405, "method not allowed")
	}
	return respond.Err(404, "not found")
}

func handleInit(env *Env, w http.ResponseWriter, r *http.Request) error {
	if msg := auth.CheckToken(env.State.Token(), r.Header.Get("X-Access-Token")); msg != "" {
		return respond.Err(401, msg)
	}
	raw, err := respond.ReadBody(r, 1<<20)
	if err != nil {
		return err
	}
	var body state.InitBody
	if len(strings.TrimSpace(string(raw))) > 0 {
		if raw[0] != '{' && strings.TrimSpace(string(raw))[0] != '{' {
			return respond.Err(400, "body must be a JSON object")
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return respond.Err(400, "invalid JSON body: "+err.Error())
		}
	}
	if body.DefaultUser != nil && *body.DefaultUser != "" && env.Users.Lookup(*body.DefaultUser) == nil {
		log.Printf("init: default user %q does not exist (yet)", *body.DefaultUser)
	}
	env.State.Apply(&body)
	// A sandbox restored from an image taken before its template had them gets them now.
	if sudo.InSandbox() {
		sudo.InstallLinks()
	}
	w.WriteHeader(204)
	return nil
}

// handleQuiesce is called by the host right before a checkpoint: runsc resets TCP
// connections open while it saves, so envd closes every other connection first and this one
// right after its answer, fd and all, before the host sees its end.
func handleQuiesce(env *Env, port int, w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Get("unlessExternalTcp") == "1" {
		n, err := externalTCPConnections(port)
		if err != nil || n != 0 {
			why := "TCP connections could not be listed"
			if err == nil {
				why = strconv.Itoa(n) + " TCP connection(s) to outside the sandbox"
			}
			w.Header().Set("Connection", "close")
			respond.Fail(w, 409, "not idle: "+why)
			return nil
		}
	}
	self, _ := r.Context().Value(connKey).(net.Conn)
	env.conns.closeAllBut(self)
	// Only where the host asks (an image many sandboxes restore, an idle sandbox's save): a
	// collection and the scavenger's madvise calls cost the checkpoint's caller ~10 ms in gVisor.
	if r.URL.Query().Get("gc") == "1" {
		debug.FreeOSMemory()
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.Header().Set("Connection", "close")
		w.WriteHeader(204)
		return nil
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return err
	}
	// Go's own Connection: close half-closes and keeps the fd ~0.5 s: written and closed here.
	buf.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
	buf.Flush()
	conn.Close()
	return nil
}

// externalTCPConnections counts established connections to outside the sandbox (not
// loopback, not envd's own port): runsc would reset them in a checkpoint.
func externalTCPConnections(ownPort int) (int, error) {
	n := 0
	for i, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			if i == 0 {
				return 0, err
			}
			continue
		}
		sc := bufio.NewScanner(fh)
		first := true
		for sc.Scan() {
			if first {
				first = false
				continue
			}
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || fs[3] != "01" {
				continue
			}
			if hexPort(fs[1]) == ownPort || hexLoopback(fs[2]) {
				continue
			}
			n++
		}
		fh.Close()
	}
	return n, nil
}

func hexPort(a string) int {
	i := strings.IndexByte(a, ':')
	if i < 0 {
		return -1
	}
	p, err := strconv.ParseInt(a[i+1:], 16, 32)
	if err != nil {
		return -1
	}
	return int(p)
}

func hexLoopback(a string) bool {
	ip := a
	if i := strings.IndexByte(a, ':'); i >= 0 {
		ip = a[:i]
	}
	switch len(ip) {
	case 8:
		return strings.HasSuffix(ip, "7F")
	case 32:
		return ip == "00000000000000000000000001000000" ||
			(strings.HasPrefix(ip, "0000000000000000FFFF0000") && strings.HasSuffix(ip, "7F"))
	}
	return false
}
