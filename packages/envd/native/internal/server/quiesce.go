package server

// POST /quiesce, the host's call right before a checkpoint, and what it asks about: the
// sandbox's TCP connections to outside it.

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"aenv/envd/internal/respond"
)

// handleQuiesce is called by the host right before a checkpoint: runsc resets TCP
// connections open while it saves, so envd closes every other connection first and this one
// right after its answer, fd and all, before the host sees its end.
func (s *server) quiesce(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Get("unlessExternalTcp") == "1" {
		n, err := externalTCPConnections(s.Port)
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
	s.conns.closeAllBut(self)
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
