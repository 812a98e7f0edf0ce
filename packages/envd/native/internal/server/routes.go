package server

// The plain routes: E2B's (/health, /init, /envs, /metrics, /files, /files/compose) and the
// host's own.

import (
	"encoding/json"
	"log"
	"net/http"
	"runtime/debug"
	"strings"

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

func (s *server) route(w http.ResponseWriter, r *http.Request) error {
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
		return s.initSandbox(w, r)
	case "/envs":
		if err := respond.MethodIs(r, "GET"); err != nil {
			return err
		}
		// Processes in the sandbox may read them without the token (the code interpreter loads
		// them into its kernels; every command envd starts has them in its environment anyway).
		// The host's requests never come from loopback: they reach envd on the slot address.
		if !sudo.InSandbox() || !fromLoopback(r) {
			if err := s.requireToken(r); err != nil {
				return err
			}
		}
		respond.JSON(w, 200, s.State.EnvVars())
		return nil
	case "/metrics":
		if err := respond.MethodIs(r, "GET"); err != nil {
			return err
		}
		if err := s.requireToken(r); err != nil {
			return err
		}
		respond.JSON(w, 200, s.metrics.Collect())
		return nil
	case accessCheck:
		// Our services inside the sandbox ask this for each caller: the same check as every
		// other route here, against the token as it is now.
		if err := respond.MethodIs(r, "GET"); err != nil {
			return err
		}
		if err := s.requireToken(r); err != nil {
			return err
		}
		w.WriteHeader(204)
		return nil
	case quiescePath:
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := s.requireToken(r); err != nil {
			return err
		}
		return s.quiesce(w, r)
	case heapReducePath:
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := s.requireToken(r); err != nil {
			return err
		}
		debug.FreeOSMemory()
		w.WriteHeader(204)
		return nil
	case fsLayerCapture, fsLayerApply:
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := s.requireToken(r); err != nil {
			return err
		}
		return fslayer.Serve(w, r, r.URL.Path == fsLayerCapture)
	case "/files/compose":
		if err := respond.MethodIs(r, "POST"); err != nil {
			return err
		}
		if err := s.requireToken(r); err != nil {
			return err
		}
		return s.Files.Compose(w, r)
	case "/files":
		switch r.Method {
		case "GET":
			return s.Files.Download(w, r)
		case "POST":
			return s.Files.Upload(w, r)
		}
		return respond.Err(405, "method not allowed")
	}
	return respond.Err(404, "not found")
}

// initSandbox serves POST /init: the sandbox's token, env vars and defaults.
func (s *server) initSandbox(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireToken(r); err != nil {
		return err
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
	if body.DefaultUser != nil && *body.DefaultUser != "" && s.Accounts.Lookup(*body.DefaultUser) == nil {
		log.Printf("init: default user %q does not exist (yet)", *body.DefaultUser)
	}
	s.State.Apply(&body)
	// A sandbox restored from an image taken before its template had them gets them now.
	if sudo.InSandbox() {
		sudo.InstallLinks()
	}
	w.WriteHeader(204)
	return nil
}
