package main

// envd's side of `sudo`/`su` (the client is init/aenv-sudo.c): a Unix socket at /run/aenv/sudo.sock that any process in the sandbox may
// use, which runs the requested command as root (or the requested user) and relays its stdio
// and exit status. Reachable only from inside this sandbox: the sandbox, not the account, is
// the security boundary here (runsc sets no_new_privs, so a setuid sudo cannot work).
//
// Frames, both ways: 1 byte type, 4 bytes big-endian length, payload.
//   from the client: 'R' request (NUL-separated: tool, cwd, argc, args…, env…), 'I' stdin,
//                    'E' stdin closed, 'S' a signal (1 byte)
//   to the client:   'O' stdout, 'X' stderr, 'C' exit status (4 bytes), 'M' error text (exit 1)

import (
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"aenv/envd/internal/users"
)

const (
	// sudoClientPath is the static client in the runtime folder mounted at /.aenv.
	sudoClientPath = "/.aenv/bin/aenv-sudo"
	sudoSocketPath = "/run/aenv/sudo.sock"
	// sudoMaxRequest is the largest frame (arguments + environment).
	sudoMaxRequest = 4 * 1024 * 1024
)

// inSandbox: only envd inside a sandbox (started by aenv-init, PID 1, with the runtime
// mounted) runs the sudo service and installs the links.
func inSandbox() bool {
	if os.Getppid() != 1 {
		return false
	}
	_, err := os.Stat(sudoClientPath)
	return err == nil
}

var sudoLinksMu sync.Mutex

// installSudoLinks puts `sudo` and `su` first on every PATH in the sandbox: symlinks in
// /usr/local/bin to aenv-sudo (/usr/local/bin comes before /usr/bin and /bin).
func installSudoLinks() {
	sudoLinksMu.Lock()
	defer sudoLinksMu.Unlock()
	for _, name := range []string{"sudo", "su"} {
		link := "/usr/local/bin/" + name
		if t, err := os.Readlink(link); err == nil && t == sudoClientPath {
			continue
		}
		if err := installSudoLink(link); err != nil {
			log.Printf("warn: %s not installed: %v", name, err)
		}
	}
}

func installSudoLink(link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o777); err != nil {
		return err
	}
	// unlink, not remove: a directory there is not ours to delete (rmSync without recursive)
	if err := syscall.Unlink(link); err != nil && err != syscall.ENOENT {
		return &os.PathError{Op: "unlink", Path: link, Err: err}
	}
	return os.Symlink(sudoClientPath, link)
}

// startSudoServer listens on /run/aenv/sudo.sock and serves sudo/su requests in the
// background; a failure is logged, not fatal.
func startSudoServer(env *Env) {
	ln, err := listenSudo(sudoSocketPath)
	if err != nil {
		log.Printf("warn: sudo service not started: %v", err)
		return
	}
	go serveSudo(ln, env.Users)
}

func listenSudo(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := syscall.Unlink(path); err != nil && err != syscall.ENOENT {
		return nil, &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Every account in the sandbox may ask: the passwordless sudo E2B's templates give.
	if err := os.Chmod(path, 0o666); err != nil {
		log.Printf("warn: sudo service: %v", err)
	}
	return ln, nil
}

func serveSudo(ln *net.UnixListener, users *users.DB) {
	delay := time.Duration(0)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				log.Printf("warn: sudo service stopped: %v", err)
				return
			}
			// EMFILE and the like: wait and try again rather than stop serving
			if delay == 0 {
				log.Printf("warn: sudo service: %v", err)
				delay = 10 * time.Millisecond
			} else if delay < time.Second {
				delay *= 2
			}
			time.Sleep(delay)
			continue
		}
		delay = 0
		s := &sudoConn{c: c, users: users}
		go s.serve()
	}
}

// sudoConn is one client: one request, then its command's stdio and exit status.
type sudoConn struct {
	c      *net.UnixConn
	users  *users.DB
	closed int32 // atomic: the socket is closed, nothing more is sent
	wmu    sync.Mutex

	mu     sync.Mutex
	proc   *os.Process
	exited bool
	stdin  *sudoStdin
	done   bool // failed ('M'): the socket closing no longer hangs up the command
}

type sudoFrame struct {
	typ     byte
	payload []byte
}

func (s *sudoConn) send(typ byte, payload []byte) {
	if atomic.LoadInt32(&s.closed) != 0 {
		return
	}
	b := make([]byte, 5+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	s.wmu.Lock()
	_, err := s.c.Write(b)
	s.wmu.Unlock()
	if err != nil && atomic.LoadInt32(&s.closed) == 0 {
		// the socket's 'error': the command is hung up on
		s.signal(syscall.SIGHUP)
	}
}

func (s *sudoConn) sendCode(code int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(int32(code)))
	s.send('C', b[:])
}

// fail sends an error the client prints as "<tool>: <message>" (exit 1) and ends the socket.
func (s *sudoConn) fail(message string) {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.send('M', []byte(message))
	s.c.CloseWrite()
}

func (s *sudoConn) closeConn() {
	atomic.StoreInt32(&s.closed, 1)
	s.c.Close()
}

// signal sends sig to the command, if it is still running.
func (s *sudoConn) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.exited {
		s.proc.Signal(sig)
	}
}

func (s *sudoConn) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// apply hands a stdin, end-of-stdin or signal frame to the command.
func (s *sudoConn) apply(f sudoFrame) {
	s.mu.Lock()
	stdin := s.stdin
	s.mu.Unlock()
	switch f.typ {
	case 'I':
		if stdin != nil {
			stdin.write(f.payload)
		}
	case 'E':
		if stdin != nil {
			stdin.end()
		}
	case 'S':
		// the signals Node knows by name on Linux: 1…31
		if len(f.payload) == 1 && f.payload[0] >= 1 && f.payload[0] <= 31 {
			s.signal(syscall.Signal(f.payload[0]))
		}
	}
}

func (s *sudoConn) serve() {
	defer s.closeConn()
	var hdr [5]byte
	started := false
	// Stdin and signals that arrive before the command started wait for it.
	var early []sudoFrame
	var readErr error
	for {
		if _, err := io.ReadFull(s.c, hdr[:]); err != nil {
			readErr = err
			break
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > sudoMaxRequest {
			s.fail("request too large")
			_, readErr = io.Copy(io.Discard, s.c)
			break
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(s.c, payload); err != nil {
			readErr = err
			break
		}
		f := sudoFrame{hdr[0], payload}
		switch {
		case f.typ == 'R':
			if started {
				continue
			}
			started = true
			s.run(payload)
			if s.running() {
				for _, e := range early {
					s.apply(e)
				}
			}
			early = nil
		case s.running():
			s.apply(f)
		case !started:
			early = append(early, f)
		}
	}
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	// 'error' hangs up on the command; so does 'close' unless the request failed
	if (readErr != nil && readErr != io.EOF && readErr != io.ErrUnexpectedEOF) || !done {
		s.signal(syscall.SIGHUP)
	}
}

// run parses and starts the request; the command's output and exit status are sent as
// they come.
