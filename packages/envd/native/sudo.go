package main

// envd's side of `sudo`/`su` (a port of src/sudo/server.ts and install.ts; the client is
// init/aenv-sudo.c): a Unix socket at /run/aenv/sudo.sock that any process in the sandbox may
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
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

func serveSudo(ln *net.UnixListener, users *UserDb) {
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
	users  *UserDb
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
func (s *sudoConn) run(payload []byte) {
	req, err := decodeSudoRequest(payload)
	if err != nil {
		s.fail(err.Error())
		return
	}
	callerName := "user"
	if v, ok := req.Env["USER"]; ok {
		callerName = v
	} else if v, ok := req.Env["LOGNAME"]; ok {
		callerName = v
	}
	var parsed *sudoRequest
	if req.Tool == "su" {
		parsed, err = parseSu(req.Args)
	} else {
		parsed, err = parseSudo(req.Args, callerName)
	}
	if err != nil {
		s.send('X', []byte(req.Tool+": "+err.Error()+"\n"))
		s.sendCode(1)
		return
	}
	if parsed.Kind == "print" {
		if parsed.Text != "" {
			s.send('O', []byte(parsed.Text))
		}
		s.sendCode(parsed.Code)
		return
	}
	target := s.users.Lookup(parsed.User)
	if target == nil {
		if req.Tool == "su" {
			s.fail("user " + parsed.User + " does not exist")
		} else {
			s.fail("unknown user " + parsed.User)
		}
		return
	}
	caller := sudoCaller{Env: req.Env, Name: callerName}
	if u := s.users.Lookup(callerName); u != nil {
		caller.UID, caller.GID = strconv.Itoa(u.UID), strconv.Itoa(u.GID)
	}
	cmd := sudoCommandFor(parsed, target, caller)
	cwd := req.Cwd
	if parsed.Login {
		cwd = target.Home
	}
	if cmd.File == "" {
		// Node's spawn() refuses this before starting anything
		s.fail("The argument 'file' cannot be empty. Received ''")
		return
	}
	if err := s.start(cmd, cwd, target); err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			s.fail(err.Error())
			return
		}
		name := sudoErrnoName(errno)
		switch errno {
		case syscall.ENOENT:
			s.send('X', []byte(req.Tool+": "+cmd.File+": command not found\n"))
			s.sendCode(127)
		case syscall.EACCES, syscall.EAGAIN, syscall.EMFILE, syscall.ENFILE:
			// reported as the child's 'error' event: "spawn <file> <CODE>"
			s.send('X', []byte(req.Tool+": "+cmd.File+": spawn "+cmd.File+" "+name+"\n"))
			s.sendCode(1)
		default:
			s.fail("spawn " + name)
		}
	}
}

// start runs cmd in cwd as target (as envd itself when target is uid and gid 0) through the
// exec helper (sudo_exec.go), with its stdio on pipes relayed as 'O'/'X' frames, and 'C'
// once it has exited and its stdout and stderr are closed.
func (s *sudoConn) start(cmd *sudoCommand, cwd string, target *User) error {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return
	}
	inR, inW, err := pipe()
	if err != nil {
		return err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return err
	}
	statusR, statusW, err := pipe()
	if err != nil {
		closeAll()
		return err
	}
	uid, gid := "", ""
	if target.UID != 0 || target.GID != 0 {
		uid, gid = strconv.Itoa(target.UID), strconv.Itoa(target.GID)
	}
	args := []string{"envd", sudoExecFlag, cwd, uid, gid, cmd.File, cmd.File}
	ec := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       append(args, cmd.Args...),
		Env:        cmd.environ(),
		Stdin:      inR,
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: []*os.File{statusW},
	}
	if err := ec.Start(); err != nil {
		closeAll()
		return err
	}
	inR.Close()
	outW.Close()
	errW.Close()
	statusW.Close()
	status, _ := io.ReadAll(statusR)
	statusR.Close()
	if len(status) >= 4 {
		// the helper could not chdir, switch user or exec: it has exited
		ec.Wait()
		inW.Close()
		outR.Close()
		errR.Close()
		return syscall.Errno(binary.BigEndian.Uint32(status))
	}

	stdin := newSudoStdin(inW)
	s.mu.Lock()
	s.proc = ec.Process
	s.stdin = stdin
	s.mu.Unlock()
	go stdin.run()
	var wg sync.WaitGroup
	wg.Add(2)
	go s.relay('O', outR, &wg)
	go s.relay('X', errR, &wg)
	go func() {
		ec.Wait()
		s.mu.Lock()
		s.exited = true
		s.mu.Unlock()
		stdin.destroy()
		wg.Wait()
		code := 128 + 1
		if ws, ok := ec.ProcessState.Sys().(syscall.WaitStatus); ok {
			if ws.Exited() {
				code = ws.ExitStatus()
			} else if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		s.sendCode(code)
	}()
	return nil
}

// relay sends what the command writes to r as frames of type typ until r's end.
func (s *sudoConn) relay(typ byte, r *os.File, wg *sync.WaitGroup) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			s.send(typ, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// sudoStdin feeds 'I' frames to the command's stdin without ever blocking the socket's
// reader (which must still see signals), as Node's buffered stdin.write() does.
type sudoStdin struct {
	mu    sync.Mutex
	cond  *sync.Cond
	queue [][]byte
	ended bool // 'E': close once the queue is written
	dead  bool // the command exited or stopped reading: drop everything
	f     *os.File
}

func newSudoStdin(f *os.File) *sudoStdin {
	p := &sudoStdin{f: f}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *sudoStdin) write(b []byte) {
	p.mu.Lock()
	if !p.ended && !p.dead && len(b) > 0 {
		p.queue = append(p.queue, b)
		p.cond.Signal()
	}
	p.mu.Unlock()
}

func (p *sudoStdin) end() {
	p.mu.Lock()
	p.ended = true
	p.cond.Signal()
	p.mu.Unlock()
}

// destroy drops what is queued and closes the pipe (a pending write returns).
func (p *sudoStdin) destroy() {
	p.mu.Lock()
	p.dead = true
	p.queue = nil
	p.cond.Signal()
	p.mu.Unlock()
	p.f.Close()
}

func (p *sudoStdin) run() {
	defer p.f.Close()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.ended && !p.dead {
			p.cond.Wait()
		}
		if p.dead || len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		b := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.mu.Unlock()
		if _, err := p.f.Write(b); err != nil {
			p.mu.Lock()
			p.dead = true
			p.queue = nil
			p.mu.Unlock()
			return
		}
	}
}

// sudoErrnoName is libuv's name for an errno, as Node's messages show it.
func sudoErrnoName(e syscall.Errno) string {
	names := map[syscall.Errno]string{
		syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EIO: "EIO", syscall.E2BIG: "E2BIG",
		syscall.ENOEXEC: "ENOEXEC", syscall.EBADF: "EBADF", syscall.EAGAIN: "EAGAIN",
		syscall.ENOMEM: "ENOMEM", syscall.EACCES: "EACCES", syscall.EFAULT: "EFAULT",
		syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.EINVAL: "EINVAL",
		syscall.ENFILE: "ENFILE", syscall.EMFILE: "EMFILE", syscall.ETXTBSY: "ETXTBSY",
		syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ELOOP: "ELOOP", syscall.ENOSYS: "ENOSYS",
		syscall.ELIBBAD: "ELIBBAD",
	}
	if n, ok := names[e]; ok {
		return n
	}
	return "Unknown system error -" + strconv.Itoa(int(e))
}
