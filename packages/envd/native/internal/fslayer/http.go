package fslayer

// The host's two routes: a capture streamed out with the sandbox's processes stopped, an
// apply read from the request's body.

import (
	"bufio"
	"log"
	"net/http"
	"syscall"
	"time"

	"aenv/envd/internal/respond"
)

// Serve serves POST /fs-layer/capture (capture) or POST /fs-layer/apply; the caller's
// method and token are checked already.
func Serve(w http.ResponseWriter, r *http.Request, capture bool) error {
	// Not in a sandbox (no template tree bound at /.aenv/lower: an envd run on a host, in a
	// test): a capture would stop every process the host has and take its whole filesystem,
	// an apply would write into the host's /. Node's envd has no such check.
	if st := layerLstat(sandboxLowerDir); st == nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return respond.Err(501, "no template tree at "+sandboxLowerDir+": this envd does not capture or apply filesystem layers here")
	}
	if capture {
		handleFsLayerCapture(w)
		return nil
	}
	return handleFsLayerApply(w, r)
}

// signalAllProcesses signals every process but init and envd (kill(2) with -1): files stay
// still while they are read.
func signalAllProcesses(sig syscall.Signal) {
	if err := syscall.Kill(-1, sig); err != nil {
		log.Printf("could not signal the sandbox's processes (%v): %v", sig, err)
	}
}

func handleFsLayerCapture(w http.ResponseWriter) {
	stats := &layerStats{}
	t0 := time.Now()
	signalAllProcesses(syscall.SIGSTOP)
	defer signalAllProcesses(syscall.SIGCONT)
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(200)
	// Many small records in few writes: each write into the sandbox's network costs a
	// syscall or more.
	bw := bufio.NewWriterSize(w, 256<<10)
	err := captureLayer(bw, "/", sandboxLowerDir, readLayerMountinfo(), stats)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// Mid-stream: the host must see a cut stream, never a short layer.
		log.Printf("filesystem layer capture failed: %v", err)
		panic(http.ErrAbortHandler)
	}
	log.Printf("filesystem layer captured: entries=%d whiteouts=%d bytes=%d ms=%d",
		stats.Entries, stats.Whiteouts, stats.Bytes, time.Since(t0).Milliseconds())
}

func handleFsLayerApply(w http.ResponseWriter, r *http.Request) error {
	t0 := time.Now()
	stats, err := applyLayer(r.Body, "/")
	if err != nil {
		return err
	}
	log.Printf("filesystem layer applied: entries=%d whiteouts=%d bytes=%d ms=%d",
		stats.Entries, stats.Whiteouts, stats.Bytes, time.Since(t0).Milliseconds())
	respond.JSON(w, 200, stats)
	return nil
}
