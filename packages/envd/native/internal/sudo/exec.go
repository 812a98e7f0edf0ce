package sudo

// The last step of starting a sudo/su command, in a short-lived copy of this binary
// (/proc/self/exe --aenv-sudo-exec …) that execs the command in its place. It does what
// libuv's child does for Node's spawn(), in the same order, which Go's own fork cannot:
// chdir to the caller's cwd while still root (so `sudo -u nobody ls` works from /root),
// then drop supplementary groups and switch to the target's gid and uid, then look the
// command up on the command's own PATH as that user (execvpe). A failure is reported as
// 4 bytes of errno on fd 3 (closed on a successful exec), and the helper exits 127.

import (
	"encoding/binary"
	"strconv"
	"strings"
	"syscall"
)

// ExecFlag, as envd's first argument, makes the process this helper (ExecMain with the
// arguments after it) instead of the daemon.
const ExecFlag = "--aenv-sudo-exec"

// ExecMain is the helper; it returns only on failure, with the exit status. args are cwd,
// uid, gid ("" and "": stay root), file, argv….
func ExecMain(args []string) int {
	report := func(err error) int {
		errno, ok := err.(syscall.Errno)
		if !ok || errno == 0 {
			errno = syscall.EINVAL
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(errno))
		syscall.Write(3, b[:])
		return 127
	}
	syscall.CloseOnExec(3)
	if len(args) < 5 {
		return report(syscall.EINVAL)
	}
	if err := syscall.Chdir(args[0]); err != nil {
		return report(err)
	}
	if args[1] != "" {
		uid, err1 := strconv.Atoi(args[1])
		gid, err2 := strconv.Atoi(args[2])
		if err1 != nil || err2 != nil {
			return report(syscall.EINVAL)
		}
		// Optimistic, as libuv: fails (harmlessly) when not root.
		_ = syscall.Setgroups(nil)
		if err := syscall.Setgid(gid); err != nil {
			return report(err)
		}
		if err := syscall.Setuid(uid); err != nil {
			return report(err)
		}
	}
	return report(execvpe(args[3], args[4:], syscall.Environ()))
}

// execvpe is libuv's uv__execvpe: a file with a slash as given, else each directory of
// the environment's PATH in turn; EACCES from any of them wins over ENOENT.
func execvpe(file string, argv, env []string) error {
	if file == "" {
		return syscall.ENOENT
	}
	if strings.Contains(file, "/") {
		return syscall.Exec(file, argv, env)
	}
	path, found := "", false
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path, found = kv[5:], true
			break
		}
	}
	if !found {
		path = "/usr/bin:/bin"
	}
	var last error = syscall.ENOENT
	for _, dir := range strings.Split(path, ":") {
		candidate := file // an empty entry is the current directory
		if dir != "" {
			candidate = dir + "/" + file
		}
		err := syscall.Exec(candidate, argv, env)
		switch err {
		case syscall.EACCES:
			last = err
		case syscall.ENOENT, syscall.ENOTDIR:
		default:
			return err
		}
	}
	return last
}
