package nodefs

// A move across filesystems: a copy of the tree (modes, times and symlinks kept), then
// removal, whose errors are worded as Node's fs.rm words them.

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// CopyTree copies src onto dst as Node's fs.cp(src, dst, {recursive, force,
// preserveTimestamps, verbatimSymlinks}) does: modes and times kept, existing files replaced,
// existing directories merged.
func CopyTree(src, dst string) error {
	st, err := Lstat(src)
	if err != nil {
		return err
	}
	dstSt, derr := Lstat(dst)
	if derr != nil && !IsErrno(derr, syscall.ENOENT) {
		return derr
	}
	if derr != nil {
		dstSt = nil
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if dstSt != nil && !IsDir(dstSt.Mode) {
			return cpErr("Cannot overwrite non-directory with directory", "EISDIR", "cannot overwrite non-directory "+dst+" with directory "+src, dst)
		}
		if dstSt == nil {
			if err := syscall.Mkdir(dst, 0o777); err != nil {
				return Wrap("mkdir", dst, err)
			}
		}
		d, err := os.Open(src)
		if err != nil {
			return Wrap("opendir", src, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return Wrap("scandir", src, err)
		}
		for _, n := range names {
			if err := CopyTree(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
				return err
			}
		}
		if dstSt == nil {
			return Wrap("chmod", dst, os.Chmod(dst, os.FileMode(st.Mode&0o777)|SpecialBits(st.Mode)))
		}
		return nil
	case syscall.S_IFREG:
		if dstSt != nil {
			if IsDir(dstSt.Mode) {
				return cpErr("Cannot overwrite directory with non-directory", "ENOTDIR", "cannot overwrite directory "+dst+" with non-directory "+src, dst)
			}
			if err := syscall.Unlink(dst); err != nil {
				return Wrap("unlink", dst, err)
			}
		}
		in, err := os.Open(src)
		if err != nil {
			return Wrap("copyfile", src, err)
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(st.Mode&0o777))
		if err != nil {
			return copyErr(err, src, dst)
		}
		_, cerr := io.Copy(out, in)
		if e := out.Close(); cerr == nil {
			cerr = e
		}
		if cerr != nil {
			return copyErr(cerr, src, dst)
		}
		ts := []syscall.Timespec{st.Atim, st.Mtim}
		if err := syscall.UtimesNano(dst, ts); err != nil {
			return Wrap("utime", dst, err)
		}
		return Wrap("chmod", dst, os.Chmod(dst, os.FileMode(st.Mode&0o777)|SpecialBits(st.Mode)))
	case syscall.S_IFLNK:
		link, err := os.Readlink(src)
		if err != nil {
			return Wrap("readlink", src, err)
		}
		if dstSt != nil {
			if err := syscall.Unlink(dst); err != nil {
				return Wrap("unlink", dst, err)
			}
		}
		if err := os.Symlink(link, dst); err != nil {
			return copyErr(err, link, dst)
		}
		return nil
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		return cpErr("Cannot copy a FIFO pipe", "EINVAL", "cannot copy a FIFO pipe: "+dst, dst)
	case syscall.S_IFSOCK:
		return cpErr("Cannot copy a socket file", "EINVAL", "cannot copy a socket file: "+dst, dst)
	}
	return cpErr("Cannot copy an unknown file type", "EINVAL", "cannot copy an unknown file type: "+dst, dst)
}

// cpErr is one of Node's fs.cp errors (ERR_FS_CP_*): no errno, so an internal error.
func cpErr(prefix, code, msg, p string) error {
	return errors.New(prefix + ": cp returned " + code + " (" + msg + ") " + p)
}

// SpecialBits are the setuid, setgid and sticky bits of mode (st_mode) as an os.FileMode.
func SpecialBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&syscall.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&syscall.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

func copyErr(err error, src, dst string) error {
	if n := Errno(err); n != 0 {
		return &Error{Errno: n, Call: "copyfile", Path: src, Dest: dst}
	}
	return err
}

// RemoveError words an os.RemoveAll failure as Node's fs.rm would.
func RemoveError(err error) error {
	pe, ok := err.(*os.PathError)
	if !ok {
		return err
	}
	call := pe.Op
	switch call {
	case "unlinkat":
		call = "unlink"
	case "openfdat", "open":
		call = "open"
	case "fdopendir", "readdirent", "readdir":
		call = "scandir"
	}
	return Wrap(call, pe.Path, pe.Err)
}
