// Reading a filesystem layer and applying it to a freshly booted sandbox's `/` (Node:
// readLayer in src/fslayer/tar.ts, src/fslayer/apply.ts): whiteouts remove, entries replace
// whatever is at their path, with mode, owner and mtime kept. Directory times are set last
// (writing into a directory changes its mtime).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
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

// ---- reading ----

// layerField is a numeric header value; ok is false where Node's parse gives NaN.
type layerField struct {
	v  int64
	ok bool
}

// layerApplyHeader is one entry as read, its numbers as Node's reader gives them (they are
// checked where Node checks them: when used).
type layerApplyHeader struct {
	Path     string
	Type     layerType
	Mode     layerField
	UID, GID layerField
	Size     int64
	Mtime    layerField
	Linkname string
}

type layerReader struct {
	r       *bufio.Reader
	pax     map[string]string
	left    int64 // contents of the current entry not read yet
	size    int64 // the current entry's size: its padding is skipped after it when not 0
	pending bool
}

func newLayerReader(src io.Reader) *layerReader {
	return &layerReader{r: bufio.NewReaderSize(src, 64<<10)}
}

// read reads exactly n bytes; end is true where the layer ended cleanly before any of them.
func (lr *layerReader) read(n int64) (b []byte, end bool, err error) {
	b = make([]byte, n)
	if _, err := io.ReadFull(lr.r, b); err != nil {
		if err == io.EOF && n > 0 {
			return nil, true, nil
		}
		if err == io.ErrUnexpectedEOF {
			return nil, false, errors.New("layer ends in the middle of a record")
		}
		return nil, false, err
	}
	return b, false, nil
}

// layerStr is a NUL-terminated header field.
func layerStr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// layerJSParseInt is JavaScript's parseInt(s, base) for bases 8 and 10: leading whitespace,
// a sign, digits up to the first other character; not ok for no digits.
func layerJSParseInt(s string, base int64) layerField {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	v, digits := int64(0), 0
	for ; digits < len(s); digits++ {
		d := int64(s[digits]) - '0'
		if d < 0 || d >= base {
			break
		}
		if v < 1<<50 {
			v = v*base + d
		}
	}
	if digits == 0 {
		return layerField{}
	}
	if neg {
		v = -v
	}
	return layerField{v, true}
}

// layerNum is a header's octal number (Node: parseInt(field.trim() || "0", 8)).
func layerNum(b []byte) layerField {
	s := strings.TrimSpace(layerStr(b))
	if s == "" {
		return layerField{0, true}
	}
	return layerJSParseInt(s, 8)
}

// layerPaxNum is a pax record's number (Node: Number(value)), integers only.
func layerPaxNum(s string) layerField {
	s = strings.TrimSpace(s)
	if s == "" {
		return layerField{0, true}
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return layerField{v, true}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == float64(int64(f)) && !strings.ContainsAny(s, "xXnN") {
		return layerField{int64(f), true}
	}
	return layerField{}
}

func layerParsePax(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for i := int64(0); i < int64(len(data)); {
		sp := bytes.IndexByte(data[i:], ' ')
		if sp < 0 {
			return nil, errors.New("bad pax record")
		}
		n := layerJSParseInt(string(data[i:i+int64(sp)]), 10)
		if !n.ok || n.v <= 0 {
			return nil, errors.New("bad pax record")
		}
		start, end := i+int64(sp)+1, i+n.v-1
		if end > int64(len(data)) {
			end = int64(len(data))
		}
		rec := ""
		if start < end {
			rec = string(data[start:end])
		}
		if eq := strings.IndexByte(rec, '='); eq >= 0 {
			out[rec[:eq]] = rec[eq+1:]
		} else if rec != "" {
			out[rec[:len(rec)-1]] = rec // as Node's rec.slice(0, -1), rec.slice(0)
		} else {
			out[""] = ""
		}
		i += n.v
	}
	return out, nil
}

// finish skips what is left of the current entry (its contents, then its padding).
func (lr *layerReader) finish() error {
	if !lr.pending {
		return nil
	}
	lr.pending = false
	if lr.left > 0 {
		n, err := io.CopyN(io.Discard, lr.r, lr.left)
		lr.left -= n
		if err == io.EOF {
			return errors.New("layer ends in the middle of a file")
		}
		if err != nil {
			return err
		}
	}
	if lr.size != 0 {
		if _, _, err := lr.read(layerPadding(lr.size)); err != nil {
			return err
		}
	}
	return nil
}

// next reads the next entry's header; io.EOF at the end-of-archive marker. Entries of
// other types than files, directories, symlinks and hard links are refused.
func (lr *layerReader) next() (*layerApplyHeader, error) {
	if err := lr.finish(); err != nil {
		return nil, err
	}
	for {
		block, end, err := lr.read(layerBlock)
		if err != nil {
			return nil, err
		}
		if end {
			return nil, errors.New("layer ends without an end-of-archive marker")
		}
		zero := true
		for _, c := range block {
			if c != 0 {
				zero = false
				break
			}
		}
		if zero {
			return nil, io.EOF
		}
		flag := block[156]
		var size layerField
		if s, ok := lr.pax["size"]; ok {
			size = layerPaxNum(s)
		} else {
			size = layerNum(block[124:136])
		}
		if !size.ok || size.v < 0 {
			return nil, errors.New("bad size in a layer header")
		}
		if flag == 'x' {
			n := size.v + layerPadding(size.v)
			if n > layerMaxPax {
				return nil, errors.New("pax header too large")
			}
			data, end, err := lr.read(n)
			if err != nil {
				return nil, err
			}
			if end {
				data = nil
			} else {
				data = data[:size.v]
			}
			if lr.pax, err = layerParsePax(data); err != nil {
				return nil, err
			}
			continue
		}
		var typ layerType
		switch flag {
		case '0', 0:
			typ = layerFile
		case '1':
			typ = layerHardlink
		case '2':
			typ = layerSymlink
		case '5':
			typ = layerDir
		default:
			return nil, fmt.Errorf("layer entry of unsupported type '%s'", string(rune(flag)))
		}
		h := &layerApplyHeader{Type: typ, Mode: layerNum(block[100:108]), Mtime: layerNum(block[136:148])}
		name, ok := lr.pax["path"]
		if !ok {
			name = layerStr(block[0:100])
		}
		h.Path = strings.TrimRight(name, "/")
		if s, ok := lr.pax["uid"]; ok {
			h.UID = layerPaxNum(s)
		} else {
			h.UID = layerNum(block[108:116])
		}
		if s, ok := lr.pax["gid"]; ok {
			h.GID = layerPaxNum(s)
		} else {
			h.GID = layerNum(block[116:124])
		}
		if typ == layerFile {
			h.Size = size.v
		}
		if h.Linkname, ok = lr.pax["linkpath"]; !ok {
			h.Linkname = layerStr(block[157:257])
		}
		lr.pax = nil
		lr.left, lr.size, lr.pending = h.Size, h.Size, true
		return h, nil
	}
}

// contents reads the current entry's next bytes into buf (0 once all are read).
func (lr *layerReader) contents(buf []byte) (int, error) {
	if lr.left <= 0 {
		return 0, nil
	}
	if int64(len(buf)) > lr.left {
		buf = buf[:lr.left]
	}
	n, err := lr.r.Read(buf)
	lr.left -= int64(n)
	if n > 0 {
		return n, nil
	}
	if err == io.EOF || err == nil {
		return 0, errors.New("layer ends in the middle of a file")
	}
	return 0, err
}

// ---- errors worded as Node's ----

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

func layerErrno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
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

// ---- applying ----

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
	switch layerErrno(err) {
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
