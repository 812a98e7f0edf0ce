package filesystem

// Writing one uploaded file, as E2B's envd does: in place (open, created if missing), then
// owned by the user, then the bytes. A directory watcher, ours or any inotify user inside the
// sandbox, therefore sees what it sees under E2B: CREATE (a new file), CHMOD (the chown),
// WRITE (the truncation of an existing file and the data), then a CHMOD for each metadata key
// removed or written.
//
// What is kept from writing beside the target and renaming: the answer comes only once the
// data (and a new file's directory entry) are on disk (fsync), and the last path component is
// opened with O_NOFOLLOW, so a symlink that a sandbox process puts there between our lookup
// and the open is not followed silently: the path is looked up again. What is given up, as
// under E2B: a reader can see the file while it is being written, and an upload whose body is
// cut or invalid leaves the file with what had arrived.

import (
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/respond"
	"aenv/envd/internal/users"
)

// Lookups of the target a racing sandbox process can make us repeat.
const openAttempts = 8

// chownIfRoot gives p to u when envd runs as root (best effort: foreign filesystems).
func chownIfRoot(p string, u *users.User) {
	if os.Geteuid() == 0 {
		os.Lchown(p, u.UID, u.GID)
	}
}

// makeParents creates dir and its missing parents, each owned by u.
func makeParents(dir string, u *users.User) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return syscall.ENOTDIR
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := makeParents(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if os.IsExist(err) {
			if st, e := os.Stat(dir); e == nil && st.IsDir() {
				return nil
			}
		}
		return err
	}
	chownIfRoot(dir, u)
	return nil
}

// finalTarget is where a write to target lands: a symlink is followed; a dangling one
// (dangling true) is to be replaced by a file at its own path.
func finalTarget(target string, depth int) (dest string, dangling bool, err error) {
	st, err := os.Lstat(target)
	if err != nil {
		if os.IsNotExist(err) {
			return target, false, nil
		}
		return "", false, err
	}
	if st.Mode()&os.ModeSymlink != 0 && depth < 40 {
		real, err := filepath.EvalSymlinks(target)
		if err != nil {
			return target, true, nil
		}
		return finalTarget(real, depth+1)
	}
	if st.IsDir() {
		return "", false, respond.Err(400, "path '"+target+"' is a directory")
	}
	return target, false, nil
}

// openUploadTarget opens target for writing without following a symlink in its last
// component, and says whether it created the file. A symlink there (or one that appears, or a
// file that goes, between the steps) sends it back to the lookup.
func openUploadTarget(target string) (*os.File, bool, error) {
	var last error
	for i := 0; i < openAttempts; i++ {
		dest, dangling, err := finalTarget(target, 0)
		if err != nil {
			return nil, false, err
		}
		if dangling {
			// unlinks the link itself, never what it names
			if err := os.Remove(dest); err != nil && !os.IsNotExist(err) {
				return nil, false, err
			}
		}
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err == nil {
			return f, true, nil
		}
		if nodefs.Errno(err) != syscall.EEXIST {
			return nil, false, err
		}
		// O_NONBLOCK: a FIFO with no reader fails instead of holding the request
		f, err = os.OpenFile(dest, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err == nil {
			return f, false, nil
		}
		if n := nodefs.Errno(err); n != syscall.ELOOP && n != syscall.ENOENT {
			return nil, false, err
		}
		last = err
	}
	return nil, false, last
}

// writeUpload writes src to target (see the top of this file) with meta as its whole
// metadata. New parent directories and the file end up owned by u; an existing file keeps its mode (a chown by root clears setuid
// and setgid, as with E2B's envd).
func writeUpload(target string, src io.Reader, u *users.User, meta map[string]string) error {
	if e := makeParents(filepath.Dir(target), u); e != nil {
		if n := nodefs.Errno(e); n == syscall.EEXIST || n == syscall.ENOTDIR {
			return respond.Err(400, "cannot create parent directory of '"+target+"': a path component is not a directory")
		}
		return writeError(target, e)
	}
	f, created, e := openUploadTarget(target)
	if e != nil {
		if _, ok := e.(*respond.Error); ok {
			return e
		}
		return writeError(target, e)
	}
	defer f.Close()
	// Always, as E2B's envd: a watcher sees the CHMOD; without root (tests) it is a no-op or
	// refused, which changes nothing.
	f.Chown(u.UID, u.GID)
	if !created {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if e := f.Truncate(0); e != nil {
				return writeError(target, e)
			}
		}
	}
	if e := copyLarge(f, src); e != nil {
		var pe *os.PathError
		if errors.As(e, &pe) {
			return writeError(target, e)
		}
		if e == gzip.ErrChecksum || e == gzip.ErrHeader || e == zlib.ErrChecksum || e == zlib.ErrHeader || strings.Contains(e.Error(), "flate") {
			return respond.Err(400, "invalid compressed body: "+e.Error())
		}
		return respond.Err(400, "reading the upload: "+e.Error())
	}
	if !created || len(meta) > 0 {
		// through the descriptor: the file written, whatever its path names now (best effort:
		// a filesystem without user xattrs)
		replaceMetadata("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), meta)
	}
	if e := f.Sync(); e != nil && !isSyncUnsupported(e) {
		return writeError(target, e)
	}
	if created {
		syncDir(filepath.Dir(f.Name()))
	}
	if e := f.Close(); e != nil {
		return writeError(target, e)
	}
	return nil
}

// isSyncUnsupported: pseudo files (/proc, /sys) and some devices have no fsync.
func isSyncUnsupported(err error) bool {
	n := nodefs.Errno(err)
	return n == syscall.EINVAL || n == syscall.EROFS || n == syscall.ENOTSUP
}

// syncDir makes a new directory entry durable (best effort: some filesystems refuse it).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
