package sudo

// Running one sudo/su command for a client of the root service: the target user's checks,
// the command started through the exec helper (exec.go), its output relayed as frames
// and its stdin fed from them.

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"aenv/envd/internal/users"
)

func (s *conn) run(payload []byte) {
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
		name := errnoName(errno)
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
// exec helper (exec.go), with its stdio on pipes relayed as 'O'/'X' frames, and 'C'
// once it has exited and its stdout and stderr are closed.
func (s *conn) start(cmd *sudoCommand, cwd string, target *users.User) error {
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
	args := []string{"envd", ExecFlag, cwd, uid, gid, cmd.File, cmd.File}
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

	stdin := newStdinQueue(inW)
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
func (s *conn) relay(typ byte, r *os.File, wg *sync.WaitGroup) {
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

// stdinQueue feeds 'I' frames to the command's stdin without ever blocking the socket's
// reader (which must still see signals), as Node's buffered stdin.write() does.
type stdinQueue struct {
	mu    sync.Mutex
	cond  *sync.Cond
	queue [][]byte
	ended bool // 'E': close once the queue is written
	dead  bool // the command exited or stopped reading: drop everything
	f     *os.File
}

func newStdinQueue(f *os.File) *stdinQueue {
	p := &stdinQueue{f: f}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *stdinQueue) write(b []byte) {
	p.mu.Lock()
	if !p.ended && !p.dead && len(b) > 0 {
		p.queue = append(p.queue, b)
		p.cond.Signal()
	}
	p.mu.Unlock()
}

func (p *stdinQueue) end() {
	p.mu.Lock()
	p.ended = true
	p.cond.Signal()
	p.mu.Unlock()
}

// destroy drops what is queued and closes the pipe (a pending write returns).
func (p *stdinQueue) destroy() {
	p.mu.Lock()
	p.dead = true
	p.queue = nil
	p.cond.Signal()
	p.mu.Unlock()
	p.f.Close()
}

func (p *stdinQueue) run() {
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

// errnoName is libuv's name for an errno, as Node's messages show it.
func errnoName(e syscall.Errno) string {
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
