package fslayer

// A layer's failed system calls, worded as "ENOENT: no such file or directory, open '/x'",
// and the argument checks (ids, modes, times) applied before each call.

import (
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

var layerErrnoText = map[syscall.Errno][2]string{
	syscall.EACCES:       {"EACCES", "permission denied"},
	syscall.EBUSY:        {"EBUSY", "resource busy or locked"},
	syscall.EEXIST:       {"EEXIST", "file already exists"},
	syscall.EFBIG:        {"EFBIG", "file too large"},
	syscall.EINVAL:       {"EINVAL", "invalid argument"},
	syscall.EIO:          {"EIO", "i/o error"},
	syscall.EISDIR:       {"EISDIR", "illegal operation on a directory"},
	syscall.ELOOP:        {"ELOOP", "too many symbolic links encountered"},
	syscall.EMLINK:       {"EMLINK", "too many links"},
	syscall.ENAMETOOLONG: {"ENAMETOOLONG", "name too long"},
	syscall.ENOENT:       {"ENOENT", "no such file or directory"},
	syscall.ENOSPC:       {"ENOSPC", "no space left on device"},
	syscall.ENOTDIR:      {"ENOTDIR", "not a directory"},
	syscall.ENOTEMPTY:    {"ENOTEMPTY", "directory not empty"},
	syscall.EPERM:        {"EPERM", "operation not permitted"},
	syscall.EROFS:        {"EROFS", "read-only file system"},
	syscall.EXDEV:        {"EXDEV", "cross-device link not permitted"},
}

// layerFsError is a failed system call: "ENOENT: no such file or directory, open '/x'".
type layerFsError struct {
	errno      syscall.Errno
	call       string
	path, dest string
}

func (e *layerFsError) Error() string {
	s := e.errno.Error() + ", " + e.call
	if t, ok := layerErrnoText[e.errno]; ok {
		s = t[0] + ": " + t[1] + ", " + e.call
	}
	if e.path != "" {
		s += " '" + e.path + "'"
	}
	if e.dest != "" {
		s += " -> '" + e.dest + "'"
	}
	return s
}

func (e *layerFsError) Unwrap() error { return e.errno }

func layerErr(err error, call, p, dest string) error {
	if err == nil {
		return nil
	}
	if errno, ok := err.(syscall.Errno); ok {
		return &layerFsError{errno, call, p, dest}
	}
	return err
}

// Node's argument checks (chown's ids, chmod's mode, utimes' times).
func layerCheckID(name string, f layerField) error {
	if !f.ok {
		return fmt.Errorf("The value of \"%s\" is out of range. It must be an integer. Received NaN", name)
	}
	if f.v < -1 || f.v > 1<<32-1 {
		return fmt.Errorf("The value of \"%s\" is out of range. It must be >= -1 && <= 4294967295. Received %d", name, f.v)
	}
	return nil
}

func layerCheckMode(f layerField) error {
	if !f.ok {
		return errors.New("The value of \"mode\" is out of range. It must be an integer. Received NaN")
	}
	if f.v < 0 || f.v > 1<<32-1 {
		return fmt.Errorf("The value of \"mode\" is out of range. It must be >= 0 && <= 4294967295. Received %d", f.v)
	}
	return nil
}

// layerTimes is a timespec pair for atime and mtime both; a negative time is now (as Node's).
func layerTimes(f layerField) (*[2]syscall.Timespec, error) {
	if !f.ok {
		return nil, errors.New("The \"time\" argument must be an instance of Date or an Time in seconds. Received type number (NaN)")
	}
	ts := syscall.Timespec{Sec: f.v}
	if f.v < 0 {
		ts = syscall.NsecToTimespec(time.Now().UnixNano())
	}
	return &[2]syscall.Timespec{ts, ts}, nil
}

// layerUtimensat: utimensat(2); with p "" it sets the times of the open file dirfd.
func layerUtimensat(dirfd int, p string, ts *[2]syscall.Timespec, flags int) error {
	var pp *byte
	if p != "" {
		var err error
		if pp, err = syscall.BytePtrFromString(p); err != nil {
			return err
		}
	}
	_, _, e := syscall.Syscall6(syscall.SYS_UTIMENSAT, uintptr(dirfd), uintptr(unsafe.Pointer(pp)),
		uintptr(unsafe.Pointer(ts)), uintptr(flags), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
