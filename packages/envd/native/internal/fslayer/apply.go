package fslayer

// Reading a filesystem layer and applying it to a freshly booted sandbox's `/`: whiteouts remove, entries replace
// whatever is at their path, with mode, owner and mtime kept. Directory times are set last
// (writing into a directory changes its mtime).

import (
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"aenv/envd/internal/nodefs"
)

// layerMaxPax bounds a pax header's data (Node's has no bound; a path and a link target of
// PATH_MAX each take under 9 KiB).
const layerMaxPax = 1 << 20

// layerAtFdcwd is AT_FDCWD (not in package syscall everywhere).
const (
	layerAtFdcwd           = -0x64
	layerAtSymlinkNofollow = 0x100
)

// layerReserved: never written by a layer (the sandbox's kernel and runtime filesystems,
// envd's own folder, the lower tree under it).
var layerReserved = map[string]bool{"proc": true, "sys": true, "dev": true, ".aenv": true}

type layerDirTime struct {
	p     string
	mtime layerField
}

type layerApplier struct {
	root string
	// dirs: a layer folder's path (relative to root) → the real folders it resolves to, for
	// folders resolved all the way; dropped whenever something is removed.
	dirs     map[string][]string
	dirTimes []layerDirTime
	stats    layerStats
}

// abs is root joined with resolved components (not cleaned: a component the walk stopped at
// must stay in the way).
func (a *layerApplier) abs(comps []string) string {
	return strings.TrimRight(a.root, "/") + "/" + strings.Join(comps, "/")
}

// walk resolves queue under the real folders cur as the kernel would with root as `/`:
// symlinks followed, absolute ones from root, `..` never above root. At a component that is
// missing or not a folder it stops and keeps the rest as it is (the system call on it then
// fails as Node's does); resolved is false then.
func (a *layerApplier) walk(cur, queue []string) (comps []string, resolved bool, err error) {
	cur = append([]string(nil), cur...)
	links := 0
	for len(queue) > 0 {
		comp := queue[0]
		queue = queue[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		p := a.abs(append(cur, comp))
		st := layerLstat(p)
		if st != nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			if links++; links > 40 {
				return nil, false, &layerFsError{syscall.ELOOP, "open", p, ""}
			}
			if target, err := os.Readlink(p); err == nil {
				if strings.HasPrefix(target, "/") {
					cur = cur[:0]
				}
				queue = append(strings.Split(target, "/"), queue...)
				continue
			}
		}
		if st == nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return append(append(cur, comp), queue...), false, nil
		}
		cur = append(cur, comp)
	}
	return cur, true, nil
}

// resolveDir resolves the layer folder parts (its key "a/b").
func (a *layerApplier) resolveDir(key string, parts []string) ([]string, bool, error) {
	if len(parts) == 0 {
		return nil, true, nil
	}
	if comps, ok := a.dirs[key]; ok {
		return comps, true, nil
	}
	n := len(parts) - 1
	parentKey := ""
	if n > 0 {
		parentKey = key[:len(key)-len(parts[n])-1]
	}
	parent, resolved, err := a.resolveDir(parentKey, parts[:n])
	if err != nil {
		return nil, false, err
	}
	if !resolved {
		return append(append([]string(nil), parent...), parts[n]), false, nil
	}
	comps, resolved, err := a.walk(parent, parts[n:])
	if err == nil && resolved {
		if a.dirs == nil {
			a.dirs = map[string][]string{}
		}
		a.dirs[key] = comps
	}
	return comps, resolved, err
}

// target is a layer path as a path under root; ok is false for one that must not be
// written: not relative, with empty, `.` or `..` parts, or in a reserved folder (before or
// after its parent folders' symlinks are followed, which never lead out of root).
func (a *layerApplier) target(rel string) (p string, ok bool, err error) {
	if rel == "" || rel[0] == '/' {
		return "", false, nil
	}
	parts := strings.Split(rel, "/")
	for _, s := range parts {
		if s == "" || s == "." || s == ".." {
			return "", false, nil
		}
	}
	if layerReserved[parts[0]] {
		return "", false, nil
	}
	n := len(parts) - 1
	dir, _, err := a.resolveDir(strings.Join(parts[:n], "/"), parts[:n])
	if err != nil {
		return "", false, err
	}
	comps := append(append([]string(nil), dir...), parts[n])
	if layerReserved[comps[0]] {
		return "", false, nil
	}
	return a.abs(comps), true, nil
}

// remove removes p and all under it, symlinks not followed; a missing p is fine (Node's
// rmSync with recursive and force).
func (a *layerApplier) remove(p string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		if err == syscall.ENOENT {
			return nil
		}
		if err := syscall.Unlink(p); err != nil && err != syscall.ENOENT {
			return layerErr(err, "unlink", p, "")
		}
		return nil
	}
	a.dirs = nil
	return os.RemoveAll(p)
}

// replacing runs create; if something is in the way, removes it and tries once more.
func (a *layerApplier) replacing(p string, create func() error) error {
	err := create()
	switch nodefs.Errno(err) {
	case syscall.EEXIST, syscall.EISDIR, syscall.ENOTDIR:
		if err := a.remove(p); err != nil {
			return err
		}
		return create()
	}
	return err
}

func layerIsDir(p string) bool {
	st := layerLstat(p)
	return st != nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR
}

func layerWriteAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return layerErr(err, "write", "", "")
		}
		b = b[n:]
	}
	return nil
}

func (a *layerApplier) file(lr *layerReader, h *layerApplyHeader, p string, buf []byte) error {
	fd := -1
	err := a.replacing(p, func() error {
		var err error
		fd, err = syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		return layerErr(err, "open", p, "")
	})
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	for {
		n, err := lr.contents(buf)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if err := layerWriteAll(fd, buf[:n]); err != nil {
			return err
		}
	}
	// Owner before mode: chown clears set-user-ID bits.
	if err := layerCheckID("uid", h.UID); err != nil {
		return err
	}
	if err := layerCheckID("gid", h.GID); err != nil {
		return err
	}
	if err := syscall.Fchown(fd, int(h.UID.v), int(h.GID.v)); err != nil {
		return layerErr(err, "fchown", "", "")
	}
	if err := layerCheckMode(h.Mode); err != nil {
		return err
	}
	if err := syscall.Fchmod(fd, uint32(h.Mode.v)); err != nil {
		return layerErr(err, "fchmod", "", "")
	}
	ts, err := layerTimes(h.Mtime)
	if err != nil {
		return err
	}
	if err := layerUtimensat(fd, "", ts, 0); err != nil {
		return layerErr(err, "futime", "", "")
	}
	return nil
}

func (a *layerApplier) dir(h *layerApplyHeader, p string) error {
	if !layerIsDir(p) {
		if err := a.replacing(p, func() error { return layerErr(syscall.Mkdir(p, 0o777), "mkdir", p, "") }); err != nil {
			return err
		}
	}
	if err := layerCheckID("uid", h.UID); err != nil {
		return err
	}
	if err := layerCheckID("gid", h.GID); err != nil {
		return err
	}
	// p is a folder (just checked or made): chown and lchown are the same here.
	if err := syscall.Lchown(p, int(h.UID.v), int(h.GID.v)); err != nil {
		return layerErr(err, "chown", p, "")
	}
	if err := layerCheckMode(h.Mode); err != nil {
		return err
	}
	if err := syscall.Chmod(p, uint32(h.Mode.v)); err != nil {
		return layerErr(err, "chmod", p, "")
	}
	a.dirTimes = append(a.dirTimes, layerDirTime{p, h.Mtime})
	return nil
}

func (a *layerApplier) symlink(h *layerApplyHeader, p string) error {
	err := a.replacing(p, func() error { return layerErr(syscall.Symlink(h.Linkname, p), "symlink", h.Linkname, p) })
	if err != nil {
		return err
	}
	if err := layerCheckID("uid", h.UID); err != nil {
		return err
	}
	if err := layerCheckID("gid", h.GID); err != nil {
		return err
	}
	if err := syscall.Lchown(p, int(h.UID.v), int(h.GID.v)); err != nil {
		return layerErr(err, "lchown", p, "")
	}
	ts, err := layerTimes(h.Mtime)
	if err != nil {
		return err
	}
	return layerErr(layerUtimensat(layerAtFdcwd, p, ts, layerAtSymlinkNofollow), "lutime", p, "")
}

func (a *layerApplier) hardlink(h *layerApplyHeader, p string) error {
	first, ok, err := a.target(h.Linkname)
	if err != nil || !ok {
		return err
	}
	// link(2) does not follow a symlink at first: the link is to the symlink itself.
	return a.replacing(p, func() error { return layerErr(syscall.Link(first, p), "link", first, p) })
}

// applyLayer applies the layer read from src to root and answers what it covered. An error
// leaves whatever was applied before it.
func applyLayer(src io.Reader, root string) (*layerStats, error) {
	a := &layerApplier{root: filepath.Clean(root)}
	lr := newLayerReader(src)
	var buf []byte
	for {
		h, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		base := h.Path[strings.LastIndexByte(h.Path, '/')+1:]
		if strings.HasPrefix(base, layerWhiteoutPrefix) {
			p, ok, err := a.target(path.Join(path.Dir(h.Path), base[len(layerWhiteoutPrefix):]))
			if err != nil {
				return nil, err
			}
			if ok {
				if err := a.remove(p); err != nil {
					return nil, err
				}
			}
			a.stats.Whiteouts++
			continue
		}
		p, ok, err := a.target(h.Path)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		a.stats.Entries++
		switch h.Type {
		case layerDir:
			err = a.dir(h, p)
		case layerFile:
			if buf == nil {
				buf = make([]byte, 1<<20)
			}
			if err = a.file(lr, h, p, buf); err == nil {
				a.stats.Bytes += h.Size
			}
		case layerSymlink:
			err = a.symlink(h, p)
		default:
			err = a.hardlink(h, p)
		}
		if err != nil {
			return nil, err
		}
	}
	for i := len(a.dirTimes) - 1; i >= 0; i-- {
		d := a.dirTimes[i]
		ts, err := layerTimes(d.mtime)
		if err != nil {
			return nil, err
		}
		// Not through a symlink (Node's utimes follows one; a folder the layer made is one).
		if err := layerUtimensat(layerAtFdcwd, d.p, ts, layerAtSymlinkNofollow); err != nil {
			return nil, layerErr(err, "utime", d.p, "")
		}
	}
	return &a.stats, nil
}
