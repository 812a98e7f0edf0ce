// Package nodefs does file operations as Node's fs module does them, since envd's clients
// were written against a Node daemon: failed system calls worded as Node words them
// ("ENOENT: no such file or directory, lstat '/x'", here), stat (stat.go), recursive mkdir
// (mkdir.go), and a cross-device copy and removal's errors (copy.go).
package nodefs

import (
	"errors"
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

// Error is a failed system call, worded as Node words it; it unwraps to its errno, which is
// what callers map onto their protocol's errors.
type Error struct {
	Errno syscall.Errno
	Call  string
	Path  string
	Dest  string
	Text  string // replaces the errno's own description when set
}

func (e *Error) Error() string {
	code, desc := "", e.Errno.Error()
	if n, ok := errnoNames[e.Errno]; ok {
		code, desc = n[0]+": ", n[1]
	}
	if e.Text != "" {
		desc = e.Text
	}
	s := code + desc + ", " + e.Call + " '" + e.Path + "'"
	if e.Dest != "" {
		s += " -> '" + e.Dest + "'"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Errno }

// Wrap words err (from the system call `call` on p) as Node does; other errors pass.
func Wrap(call, p string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*Error); ok {
		return err
	}
	if n := Errno(err); n != 0 {
		return &Error{Errno: n, Call: call, Path: p}
	}
	return err
}

// Errno is the errno err wraps, or 0.
func Errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// IsErrno: err wraps errno n.
func IsErrno(err error, n syscall.Errno) bool { return Errno(err) == n }
