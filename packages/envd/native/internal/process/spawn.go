package process

// Starting a command: its environment, the executable's lookup, pipes or a PTY, the user it
// runs as, and its own session (so signals reach its whole process group).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unsafe"

	"aenv/envd/internal/users"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildProcessEnv: PATH (envd's own), HOME, USER, LOGNAME, the sandbox's env vars, the
// request's envs; a later value replaces an earlier one in place (process/env.ts).
func buildProcessEnv(u *users.User, sandbox map[string]string, request map[string]string) envMap {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env := envMap{{"PATH", path}, {"HOME", u.Home}, {"USER", u.Name}, {"LOGNAME", u.Name}}
	env.setAll(sandbox)
	env.setAll(request)
	return env
}

type envKV struct{ K, V string }

// envMap is a process's environment in order: a later value replaces an earlier one in place.
type envMap []envKV

func (m *envMap) set(k, v string) {
	for i := range *m {
		if (*m)[i].K == k {
			(*m)[i].V = v
			return
		}
	}
	*m = append(*m, envKV{k, v})
}

// setAll sets every entry of vars, in the order of their names (a map has none of its own).
func (m *envMap) setAll(vars map[string]string) {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.set(k, vars[k])
	}
}

func (m envMap) strings() []string {
	out := make([]string, 0, len(m))
	for _, e := range m {
		out = append(out, e.K+"="+e.V)
	}
	return out
}

func (m envMap) get(k string) (string, bool) {
	for _, e := range m {
		if e.K == k {
			return e.V, true
		}
	}
	return "", false
}

// lookPath finds cmd as execvp in the child would: a name with a slash as given (relative to
// the child's cwd), otherwise the first executable file on the child's own PATH.
func lookPath(cmd string, env envMap, cwd string) (string, error) {
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	path, ok := env.get("PATH")
	if !ok {
		path = defaultPath
	}
	denied := false
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", syscall.ENOENT
}

var spawnErrnoNames = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.EACCES: "EACCES", syscall.EPERM: "EPERM",
	syscall.ENOEXEC: "ENOEXEC", syscall.ENOTDIR: "ENOTDIR", syscall.E2BIG: "E2BIG",
	syscall.ELOOP: "ELOOP", syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ETXTBSY: "ETXTBSY",
	syscall.EINVAL: "EINVAL", syscall.ENOMEM: "ENOMEM", syscall.EAGAIN: "EAGAIN",
	syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE", syscall.EISDIR: "EISDIR",
}

// spawnError words a start failure as Node's spawn does ("spawn /nope ENOENT").
func spawnError(cmd string, err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name, ok := spawnErrnoNames[errno]; ok {
			return fmt.Sprintf("spawn %s %s", cmd, name)
		}
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("spawn %s: %v", cmd, pe.Err)
	}
	return err.Error()
}

// credential for running as uid/gid with no supplementary groups; nil when it would change
// nothing (envd not root and the user is envd's own).
func credential(uid, gid int) *syscall.Credential {
	if os.Getuid() != 0 && uid == os.Getuid() && gid == os.Getgid() {
		return nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

type spawnSpec struct {
	cmd   string
	args  []string
	cwd   string
	env   envMap
	uid   int
	gid   int
	stdin bool
	pty   *ptySize
}

type ptySize struct{ cols, rows uint16 }

// spawned is a started child with envd's ends of its streams.
type spawned struct {
	process *os.Process
	stdin   *os.File   // pipe to the child's stdin (nil: none)
	master  *os.File   // PTY master (PTY processes)
	outputs []*os.File // read ends: stdout and stderr, or the master
	kinds   []string
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// spawnPipes starts spec with pipes for stdout and stderr, and stdin (or /dev/null).
func spawnPipes(spec *spawnSpec) (*spawned, error) {
	var childFiles, ours []*os.File
	fail := func(err error) (*spawned, error) {
		closeFiles(childFiles...)
		closeFiles(ours...)
		return nil, err
	}
	var stdinW *os.File
	if spec.stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		childFiles = append(childFiles, r)
		ours = append(ours, w)
		stdinW = w
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			// no /dev/null: a pipe whose writer is gone reads as EOF all the same
			r, w, perr := os.Pipe()
			if perr != nil {
				return fail(perr)
			}
			w.Close()
			null = r
		}
		childFiles = append(childFiles, null)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	childFiles = append(childFiles, outW)
	ours = append(ours, outR)
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	childFiles = append(childFiles, errW)
	ours = append(ours, errR)

	path, err := lookPath(spec.cmd, spec.env, spec.cwd)
	if err != nil {
		return fail(err)
	}
	proc, err := os.StartProcess(path, append([]string{spec.cmd}, spec.args...), &os.ProcAttr{
		Dir:   spec.cwd,
		Env:   spec.env.strings(),
		Files: childFiles,
		Sys: &syscall.SysProcAttr{
			Setsid:     true, // own session and process group: signals reach the whole tree
			Credential: credential(spec.uid, spec.gid),
		},
	})
	if err != nil {
		return fail(err)
	}
	closeFiles(childFiles...)
	return &spawned{process: proc, stdin: stdinW, outputs: []*os.File{outR, errR}, kinds: []string{"stdout", "stderr"}}, nil
}

func ioctlFile(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); cerr != nil {
		return cerr
	}
	if errno != 0 {
		return errno
	}
	return nil
}

type ptyWinsize struct{ Row, Col, X, Y uint16 }

func setWinsize(f *os.File, cols, rows uint16) error {
	ws := ptyWinsize{Row: rows, Col: cols}
	return ioctlFile(f, syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
}

// pendingBytes is how much unread data a pipe or the PTY holds (FIONREAD).
func pendingBytes(f *os.File) int {
	var n int32
	if err := ioctlFile(f, syscall.TIOCINQ, unsafe.Pointer(&n)); err != nil {
		return 0
	}
	return int(n)
}

// terminal settings of a new PTY as node-pty (src/unix/pty.cc) sets them, which E2B's
// clients were written against; no IUTF8.
func ptyTermios() *syscall.Termios {
	t := &syscall.Termios{
		Iflag:  syscall.ICRNL | syscall.IXON | syscall.IXANY | syscall.IMAXBEL | syscall.BRKINT,
		Oflag:  syscall.OPOST | syscall.ONLCR,
		Cflag:  syscall.CREAD | syscall.CS8 | syscall.HUPCL | syscall.B38400,
		Lflag:  syscall.ICANON | syscall.ISIG | syscall.IEXTEN | syscall.ECHO | syscall.ECHOE | syscall.ECHOK | syscall.ECHOKE | syscall.ECHOCTL,
		Ispeed: syscall.B38400,
		Ospeed: syscall.B38400,
	}
	cc := map[int]uint8{
		syscall.VEOF: 4, syscall.VEOL: 0xff, syscall.VEOL2: 0xff, syscall.VERASE: 0x7f,
		syscall.VWERASE: 23, syscall.VKILL: 21, syscall.VREPRINT: 18, syscall.VINTR: 3,
		syscall.VQUIT: 0x1c, syscall.VSUSP: 26, syscall.VSTART: 17, syscall.VSTOP: 19,
		syscall.VLNEXT: 22, syscall.VDISCARD: 15, syscall.VMIN: 1, syscall.VTIME: 0,
	}
	for i, v := range cc {
		t.Cc[i] = v
	}
	return t
}

// openPty: a new master (/dev/ptmx, unlocked) and its slave, sized.
func openPty(size ptySize) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if err = ioctlFile(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	var n uint32
	if err = ioctlFile(master, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	if err = ioctlFile(slave, syscall.TCSETS, unsafe.Pointer(ptyTermios())); err != nil {
		closeFiles(master, slave)
		return nil, nil, fmt.Errorf("setting the terminal: %w", err)
	}
	if err = setWinsize(master, size.cols, size.rows); err != nil {
		closeFiles(master, slave)
		return nil, nil, fmt.Errorf("setting the terminal size: %w", err)
	}
	return master, slave, nil
}

// spawnPty starts spec on a new PTY, its controlling terminal in a session of its own.
func spawnPty(spec *spawnSpec) (*spawned, error) {
	master, slave, err := openPty(*spec.pty)
	if err != nil {
		return nil, err
	}
	// node-pty sets these two for the child
	env := append(envMap(nil), spec.env...)
	env.set("PWD", spec.cwd)
	env.set("TERM", "xterm-256color")
	path, err := lookPath(spec.cmd, env, spec.cwd)
	if err != nil {
		closeFiles(master, slave)
		return nil, err
	}
	proc, err := os.StartProcess(path, append([]string{spec.cmd}, spec.args...), &os.ProcAttr{
		Dir:   spec.cwd,
		Env:   env.strings(),
		Files: []*os.File{slave, slave, slave},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Setctty:    true,
			Ctty:       0, // the child's fd 0: the slave
			Credential: credential(spec.uid, spec.gid),
		},
	})
	slave.Close()
	if err != nil {
		master.Close()
		return nil, err
	}
	return &spawned{process: proc, master: master, outputs: []*os.File{master}, kinds: []string{"pty"}}, nil
}
