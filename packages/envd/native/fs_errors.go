package main

// Failed system calls worded as clients of envd have always read them ("ENOENT: no such file
// or directory, lstat '/x'"), unwrapping to their errno so that fsRPCError maps them.

import (
	"syscall"
)

var errnoNames = map[syscall.Errno][2]string{
	syscall.E2BIG:        {"E2BIG", "argument list too long"},
	syscall.EACCES:       {"EACCES", "permission denied"},
	syscall.EAGAIN:       {"EAGAIN", "resource temporarily unavailable"},
	syscall.EBADF:        {"EBADF", "bad file descriptor"},
	syscall.EBUSY:        {"EBUSY", "resource busy or locked"},
	syscall.EDQUOT:       {"EDQUOT", "disk quota exceeded"},
	syscall.EEXIST:       {"EEXIST", "file already exists"},
	syscall.EFAULT:       {"EFAULT", "bad address in system call argument"},
	syscall.EFBIG:        {"EFBIG", "file too large"},
	syscall.EINTR:        {"EINTR", "interrupted system call"},
	syscall.EINVAL:       {"EINVAL", "invalid argument"},
	syscall.EIO:          {"EIO", "i/o error"},
	syscall.EISDIR:       {"EISDIR", "illegal operation on a directory"},
	syscall.ELOOP:        {"ELOOP", "too many symbolic links encountered"},
	syscall.EMFILE:       {"EMFILE", "too many open files"},
	syscall.EMLINK:       {"EMLINK", "too many links"},
	syscall.ENAMETOOLONG: {"ENAMETOOLONG", "name too long"},
	syscall.ENFILE:       {"ENFILE", "file table overflow"},
	syscall.ENODATA:      {"ENODATA", "no data available"},
	syscall.ENODEV:       {"ENODEV", "no such device"},
	syscall.ENOENT:       {"ENOENT", "no such file or directory"},
	syscall.ENOMEM:       {"ENOMEM", "not enough memory"},
	syscall.ENOSPC:       {"ENOSPC", "no space left on device"},
	syscall.ENOSYS:       {"ENOSYS", "function not implemented"},
	syscall.ENOTDIR:      {"ENOTDIR", "not a directory"},
	syscall.ENOTEMPTY:    {"ENOTEMPTY", "directory not empty"},
	syscall.ENOTSUP:      {"ENOTSUP", "operation not supported on socket"},
	syscall.ENXIO:        {"ENXIO", "no such device or address"},
	syscall.EOVERFLOW:    {"EOVERFLOW", "value too large for defined data type"},
	syscall.EPERM:        {"EPERM", "operation not permitted"},
	syscall.EROFS:        {"EROFS", "read-only file system"},
	syscall.ESPIPE:       {"ESPIPE", "invalid seek"},
	syscall.ESTALE:       {"ESTALE", "stale file handle"},
	syscall.ETXTBSY:      {"ETXTBSY", "text file is busy"},
	syscall.EXDEV:        {"EXDEV", "cross-device link not permitted"},
}

// nodeFsError is a failed system call, worded as Node words it; it unwraps to its errno so
// that fsRPCError maps it.
type nodeFsError struct {
	errno syscall.Errno
	call  string
	path  string
	dest  string
	text  string // replaces the errno's own description when set
}

func (e *nodeFsError) Error() string {
	code, desc := "", e.errno.Error()
	if n, ok := errnoNames[e.errno]; ok {
		code, desc = n[0]+": ", n[1]
	}
	if e.text != "" {
		desc = e.text
	}
	s := code + desc + ", " + e.call + " '" + e.path + "'"
	if e.dest != "" {
		s += " -> '" + e.dest + "'"
	}
	return s
}

func (e *nodeFsError) Unwrap() error { return e.errno }

// nodeErr words err (from the system call `call` on p) as Node does; other errors pass.
func nodeErr(call, p string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*nodeFsError); ok {
		return err
	}
	if n := errnoOf(err); n != 0 {
		return &nodeFsError{errno: n, call: call, path: p}
	}
	return err
}

func isErrno(err error, n syscall.Errno) bool { return errnoOf(err) == n }
