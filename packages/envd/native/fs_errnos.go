package main

import (
	"syscall"

	"aenv/envd/internal/connect"
	"aenv/envd/internal/nodefs"
)

// statusForErrno maps a file operation's errno onto an HTTP status.
func statusForErrno(err error) int {
	switch nodefs.Errno(err) {
	case syscall.ENOENT:
		return 404
	case syscall.EISDIR, syscall.ENOTDIR, syscall.ENAMETOOLONG, syscall.EINVAL, syscall.ELOOP:
		return 400
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return 403
	case syscall.ENOSPC, syscall.EDQUOT:
		return 507
	}
	return 500
}

// fsRPCError maps a filesystem error on p onto a Connect error.
func fsRPCError(err error, p string) error {
	if _, ok := err.(*connect.Error); ok {
		return err
	}
	msg := err.Error()
	switch nodefs.Errno(err) {
	case syscall.ENOENT:
		return connect.Errorf(connect.CodeNotFound, "path '%s' does not exist", p)
	case syscall.ENOTDIR:
		return connect.Errorf(connect.CodeInvalidArgument, "path '%s' is not a directory: %s", p, msg)
	case syscall.EISDIR:
		return connect.Errorf(connect.CodeInvalidArgument, "path '%s' is a directory", p)
	case syscall.EEXIST:
		return connect.Errorf(connect.CodeAlreadyExists, "path '%s' already exists", p)
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return connect.Errorf(connect.CodePermissionDenied, "permission denied for '%s': %s", p, msg)
	case syscall.ENOSPC, syscall.EDQUOT:
		return connect.Errorf(connect.CodeResourceExhausted, "not enough disk space: %s", msg)
	case syscall.ENAMETOOLONG, syscall.EINVAL, syscall.ELOOP:
		return connect.Errorf(connect.CodeInvalidArgument, "invalid path '%s': %s", p, msg)
	}
	return connect.Errorf(connect.CodeInternal, "error on '%s': %s", p, msg)
}
