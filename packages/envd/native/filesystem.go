package main

// filesystem.Filesystem (§5.7), as the Node envd's src/filesystem/service.ts serves it: Stat,
// MakeDir, Move, ListDir, Remove, WatchDir (a server stream) and the polling watchers.
// Everything runs as envd's own user (root in a sandbox); the RPC's user decides how paths
// resolve and who owns what MakeDir and Move create.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// ---- messages (proto3 JSON as protobuf-es writes it: zero values left out) ----

// fsEntry is filesystem.EntryInfo.
type fsEntry struct {
	Name          string            `json:"name,omitempty"`
	Type          string            `json:"type,omitempty"`
	Path          string            `json:"path,omitempty"`
	Size          int64             `json:"size,omitempty,string"`
	Mode          uint32            `json:"mode,omitempty"`
	Permissions   string            `json:"permissions,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Group         string            `json:"group,omitempty"`
	ModifiedTime  string            `json:"modifiedTime"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// fsEvent is filesystem.FilesystemEvent.
type fsEvent struct {
	Name  string   `json:"name,omitempty"`
	Type  string   `json:"type,omitempty"`
	Entry *fsEntry `json:"entry,omitempty"`
}

type fsEntryResponse struct {
	Entry *fsEntry `json:"entry"`
}

type fsListResponse struct {
	Entries []*fsEntry `json:"entries,omitempty"`
}

type fsEventsResponse struct {
	Events []fsEvent `json:"events,omitempty"`
}

type fsCreateWatcherResponse struct {
	WatcherID string `json:"watcherId,omitempty"`
}

type fsEmpty struct{}

// WatchDirResponse's oneof members.
type fsWatchStart struct {
	Start fsEmpty `json:"start"`
}

type fsWatchEvent struct {
	Filesystem fsEvent `json:"filesystem"`
}

type fsWatchKeepalive struct {
	Keepalive fsEmpty `json:"keepalive"`
}

const (
	fileTypeUnspecified = "" // FILE_TYPE_UNSPECIFIED: the zero value, left out
	fileTypeFile        = "FILE_TYPE_FILE"
	fileTypeDirectory   = "FILE_TYPE_DIRECTORY"
	fileTypeSymlink     = "FILE_TYPE_SYMLINK"

	eventCreate = "EVENT_TYPE_CREATE"
	eventWrite  = "EVENT_TYPE_WRITE"
	eventRemove = "EVENT_TYPE_REMOVE"
	eventRename = "EVENT_TYPE_RENAME"
	eventChmod  = "EVENT_TYPE_CHMOD"
)

// ---- request decoding (proto3 JSON: lowerCamelCase or proto names, null = default) ----

type fsFields struct {
	msg string
	raw map[string]json.RawMessage
}

func fsDecode(c *Call, msg string) (*fsFields, error) {
	f := &fsFields{msg: msg, raw: map[string]json.RawMessage{}}
	if body := bytes.TrimSpace(c.Body); len(body) > 0 && body[0] != '{' && json.Valid(body) {
		return nil, rpcErr(CodeInvalidArgument, "cannot decode message filesystem.%s from JSON: %s", msg, formatJSONVal(body))
	}
	if err := c.Decode(&f.raw); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *fsFields) get(names ...string) (json.RawMessage, string) {
	for _, n := range names {
		if v, ok := f.raw[n]; ok && strings.TrimSpace(string(v)) != "null" {
			return v, n
		}
	}
	return nil, ""
}

// formatJSONVal is protobuf-es's formatVal for a JSON value.
func formatJSONVal(v json.RawMessage) string {
	var x interface{}
	if json.Unmarshal(v, &x) != nil {
		return string(v)
	}
	switch t := x.(type) {
	case nil:
		return "null"
	case string:
		if utf8.RuneCountInString(t) > 30 {
			return "string"
		}
		return `"` + strings.ReplaceAll(t, `"`, `\"`) + `"`
	case []interface{}:
		return "Array(" + strconv.Itoa(len(t)) + ")"
	case map[string]interface{}:
		return "object"
	}
	return strings.TrimSpace(string(v))
}

func (f *fsFields) bad(name, reason string) error {
	return rpcErr(CodeInvalidArgument, "cannot decode field filesystem.%s.%s from JSON: %s", f.msg, name, reason)
}

func (f *fsFields) str(names ...string) (string, error) {
	v, n := f.get(names...)
	if v == nil {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", f.bad(n, "expected string, got "+formatJSONVal(v))
	}
	return s, nil
}

func (f *fsFields) boolean(names ...string) (bool, error) {
	v, n := f.get(names...)
	if v == nil {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, f.bad(n, "expected boolean, got "+formatJSONVal(v))
	}
	return b, nil
}

func (f *fsFields) uint32(names ...string) (uint32, error) {
	v, n := f.get(names...)
	if v == nil {
		return 0, nil
	}
	var num json.Number
	if err := json.Unmarshal(v, &num); err != nil {
		// a decimal string is a valid proto3 JSON integer too
		var s string
		if json.Unmarshal(v, &s) != nil || s == "" || strings.TrimSpace(s) != s {
			return 0, f.bad(n, "expected number (uint32), got "+formatJSONVal(v))
		}
		num = json.Number(s)
	}
	x, err := strconv.ParseFloat(string(num), 64)
	if err != nil || x != math.Trunc(x) {
		return 0, f.bad(n, "expected number (uint32), got "+formatJSONVal(v))
	}
	if x < 0 || x > math.MaxUint32 {
		return 0, f.bad(n, "expected number (uint32): "+strconv.FormatFloat(x, 'f', -1, 64)+" out of range")
	}
	return uint32(x), nil
}

// ---- errors with Node's messages ("ENOENT: no such file or directory, lstat '/x'") ----

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

// ---- EntryInfo ----

// goModeString is Go's os.FileMode.String() for a Unix st_mode (the Node envd's goModeString).
func goModeString(mode uint32) string {
	f := mode & syscall.S_IFMT
	var b strings.Builder
	if f == syscall.S_IFDIR {
		b.WriteByte('d')
	}
	if f == syscall.S_IFLNK {
		b.WriteByte('L')
	}
	if f == syscall.S_IFBLK || f == syscall.S_IFCHR {
		b.WriteByte('D')
	}
	if f == syscall.S_IFIFO {
		b.WriteByte('p')
	}
	if f == syscall.S_IFSOCK {
		b.WriteByte('S')
	}
	if mode&syscall.S_ISUID != 0 {
		b.WriteByte('u')
	}
	if mode&syscall.S_ISGID != 0 {
		b.WriteByte('g')
	}
	if f == syscall.S_IFCHR {
		b.WriteByte('c')
	}
	if mode&syscall.S_ISVTX != 0 {
		b.WriteByte('t')
	}
	switch f {
	case syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFREG, syscall.S_IFBLK, syscall.S_IFCHR, syscall.S_IFIFO, syscall.S_IFSOCK:
	default:
		b.WriteByte('?')
	}
	if b.Len() == 0 {
		b.WriteByte('-')
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if mode&(1<<uint(8-i)) != 0 {
			b.WriteByte(rwx[i])
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

func fileTypeOf(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		return fileTypeSymlink
	case syscall.S_IFDIR:
		return fileTypeDirectory
	case syscall.S_IFREG:
		return fileTypeFile
	}
	return fileTypeUnspecified
}

func isDirMode(mode uint32) bool { return mode&syscall.S_IFMT == syscall.S_IFDIR }

// mtimeMs is Node's Stats.mtimeMs (a double, computed the way Node does).
func mtimeMs(st *syscall.Stat_t) float64 {
	return float64(st.Mtim.Sec)*1e3 + float64(st.Mtim.Nsec)/1e6
}

// timestampJSON is google.protobuf.Timestamp's JSON for a time in whole milliseconds (the Node
// envd's timestampFromMs(Math.floor(mtimeMs)) through protobuf-es's toJson).
func timestampJSON(ms float64) string {
	m := int64(math.Floor(ms))
	sec := m / 1000
	if m%1000 < 0 {
		sec--
	}
	frac := m - sec*1000
	s := time.Unix(sec, 0).UTC().Format("2006-01-02T15:04:05")
	if frac != 0 {
		s += "." + strconv.FormatInt(frac+1000, 10)[1:]
	}
	return s + "Z"
}

// entryFromStat builds abs's EntryInfo from its lstat result; displayPath is the path reported.
func entryFromStat(abs string, st *syscall.Stat_t, acc *Accounts, displayPath string) *fsEntry {
	name := filepath.Base(displayPath)
	if name == "" || name == "." {
		name = "/"
	}
	e := &fsEntry{
		Name:         name,
		Type:         fileTypeOf(st.Mode),
		Path:         displayPath,
		Size:         st.Size,
		Mode:         st.Mode & 0o777,
		Permissions:  goModeString(st.Mode),
		ModifiedTime: timestampJSON(mtimeMs(st)),
	}
	if u, ok := acc.ByUID[int(st.Uid)]; ok {
		e.Owner = u.Name
	} else {
		e.Owner = strconv.FormatUint(uint64(st.Uid), 10)
	}
	if g, ok := acc.GroupByGID[int(st.Gid)]; ok {
		e.Group = g
	} else {
		e.Group = strconv.FormatUint(uint64(st.Gid), 10)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		// realpath, else the link's text resolved against its directory
		if t, err := filepath.EvalSymlinks(abs); err == nil {
			t = absClean(t)
			e.SymlinkTarget = &t
		} else if link, err := os.Readlink(abs); err == nil {
			if !filepath.IsAbs(link) {
				link = filepath.Join(filepath.Dir(abs), link)
			}
			t := absClean(link)
			e.SymlinkTarget = &t
		}
		// user.* attributes cannot be set on symlinks: no metadata
	} else {
		e.Metadata = getMetadata(abs)
	}
	return e
}

func absClean(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

func lstatT(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Lstat(p, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, nodeErr("lstat", p, err)
		}
		return &st, nil
	}
}

func statT(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Stat(p, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, nodeErr("stat", p, err)
		}
		return &st, nil
	}
}

// entryFor: lstat + EntryInfo; the lstat error as is (ENOENT etc.).
func (s *fsService) entryFor(abs string) (*fsEntry, error) {
	st, err := lstatT(abs)
	if err != nil {
		return nil, err
	}
	return entryFromStat(abs, st, s.env.Users.Accounts(), abs), nil
}

// ---- ownership (ownership.ts) ----

func fsChownIfRoot(p string, u *User) {
	if os.Getuid() != 0 {
		return
	}
	os.Chown(p, u.UID, u.GID) // best effort (read-only or foreign filesystems)
}

// fsMkdirp is Node's fs.mkdir(dir, {recursive: true, mode: 0o755}): the first directory it
// created ("" when dir existed already). A path that exists and is no directory: EEXIST for
// dir itself, ENOTDIR for a parent.
func fsMkdirp(dir string) (string, error) {
	first, err := fsMkdirpAt(dir, true)
	if err != nil {
		if n := errnoOf(err); n != 0 {
			return "", &nodeFsError{errno: n, call: "mkdir", path: dir}
		}
	}
	return first, err
}

func fsMkdirpAt(dir string, target bool) (string, error) {
	err := syscall.Mkdir(dir, 0o755)
	if err == syscall.ENOENT {
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", err
		}
		first, perr := fsMkdirpAt(parent, false)
		if perr != nil {
			return "", perr
		}
		err = syscall.Mkdir(dir, 0o755)
		if err == nil {
			if first == "" {
				first = dir
			}
			return first, nil
		}
		if err != syscall.EEXIST {
			return "", err
		}
	}
	switch err {
	case nil:
		return dir, nil
	case syscall.EEXIST:
		st, serr := statT(dir)
		if serr != nil {
			return "", serr
		}
		if !isDirMode(st.Mode) {
			if target {
				return "", syscall.EEXIST
			}
			return "", syscall.ENOTDIR
		}
		return "", nil
	}
	return "", err
}

// mkdirpOwnedFs creates dir and its missing parents, the new ones owned by u; whether dir was created.
func mkdirpOwnedFs(dir string, u *User) (bool, error) {
	first, err := fsMkdirp(dir)
	if err != nil || first == "" {
		return false, err
	}
	cur := first
	fsChownIfRoot(cur, u)
	if rel, err := filepath.Rel(first, dir); err == nil && rel != "." {
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			cur = filepath.Join(cur, part)
			fsChownIfRoot(cur, u)
		}
	}
	return true, nil
}

// ---- the service ----

type fsService struct{ env *Env }

func registerFilesystemService(rt *rpcRoutes, env *Env) {
	s := &fsService{env: env}
	const pre = "/filesystem.Filesystem/"
	rt.unary[pre+"Stat"] = s.stat
	rt.unary[pre+"MakeDir"] = s.makeDir
	rt.unary[pre+"Move"] = s.move
	rt.unary[pre+"ListDir"] = s.listDir
	rt.unary[pre+"Remove"] = s.remove
	rt.stream[pre+"WatchDir"] = s.watchDir
	rt.unary[pre+"CreateWatcher"] = s.createWatcher
	rt.unary[pre+"GetWatcherEvents"] = s.getWatcherEvents
	rt.unary[pre+"RemoveWatcher"] = s.removeWatcher
}

// resolveFor is the request's path resolved for the RPC's user.
func (s *fsService) resolveFor(c *Call, p string) (string, *User, error) {
	u, err := s.env.rpcUser(c)
	if err != nil {
		return "", nil, err
	}
	return s.env.resolvePathFor(p, u), u, nil
}

// requireDir: p must exist (following symlinks) and be a directory.
func requireDir(p string) error {
	st, err := statT(p)
	if err != nil {
		return fsRPCError(err, p)
	}
	if !isDirMode(st.Mode) {
		return rpcErr(CodeInvalidArgument, "path '%s' is not a directory", p)
	}
	return nil
}

func (s *fsService) stat(c *Call) (interface{}, error) {
	f, err := fsDecode(c, "StatRequest")
	if err != nil {
		return nil, err
	}
	rp, err := f.str("path")
	if err != nil {
		return nil, err
	}
	p, _, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	e, err := s.entryFor(p)
	if err != nil {
		return nil, fsRPCError(err, p)
	}
	return fsEntryResponse{e}, nil
}

func (s *fsService) makeDir(c *Call) (interface{}, error) {
	f, err := fsDecode(c, "MakeDirRequest")
	if err != nil {
		return nil, err
	}
	rp, err := f.str("path")
	if err != nil {
		return nil, err
	}
	p, u, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	if st, err := statT(p); err == nil {
		if isDirMode(st.Mode) {
			return nil, rpcErr(CodeAlreadyExists, "directory '%s' already exists", p)
		}
		return nil, rpcErr(CodeInvalidArgument, "path '%s' already exists but it is not a directory", p)
	} else if !isErrno(err, syscall.ENOENT) {
		return nil, fsRPCError(err, p)
	}
	if _, err := mkdirpOwnedFs(p, u); err != nil {
		if isErrno(err, syscall.EEXIST) {
			return nil, rpcErr(CodeInvalidArgument, "path '%s' already exists but it is not a directory", p)
		}
		return nil, fsRPCError(err, p)
	}
	e, err := s.entryFor(p)
	if err != nil {
		return nil, fsRPCError(err, p)
	}
	return fsEntryResponse{e}, nil
}

func (s *fsService) move(c *Call) (interface{}, error) {
	f, err := fsDecode(c, "MoveRequest")
	if err != nil {
		return nil, err
	}
	rsrc, err := f.str("source")
	if err != nil {
		return nil, err
	}
	rdst, err := f.str("destination")
	if err != nil {
		return nil, err
	}
	u, err := s.env.rpcUser(c)
	if err != nil {
		return nil, err
	}
	src := s.env.resolvePathFor(rsrc, u)
	dst := s.env.resolvePathFor(rdst, u)
	if _, err := lstatT(src); err != nil {
		return nil, fsRPCError(err, src)
	}
	if _, err := mkdirpOwnedFs(filepath.Dir(dst), u); err != nil {
		return nil, fsRPCError(err, dst)
	}
	if err := syscall.Rename(src, dst); err != nil {
		if err != syscall.EXDEV {
			if n := errnoOf(err); n != 0 {
				err = &nodeFsError{errno: n, call: "rename", path: src, dest: dst}
			}
			return nil, fsRPCError(err, dst)
		}
		// another filesystem: copy (timestamps kept, symlinks verbatim), then remove the source
		if err := copyTree(src, dst); err != nil {
			return nil, fsRPCError(err, dst)
		}
		if err := os.RemoveAll(src); err != nil {
			return nil, fsRPCError(removeErr(err), dst)
		}
	}
	e, err := s.entryFor(dst)
	if err != nil {
		return nil, fsRPCError(err, dst)
	}
	return fsEntryResponse{e}, nil
}

// copyTree copies src onto dst as Node's fs.cp(src, dst, {recursive, force,
// preserveTimestamps, verbatimSymlinks}) does: modes and times kept, existing files replaced,
// existing directories merged.
func copyTree(src, dst string) error {
	st, err := lstatT(src)
	if err != nil {
		return err
	}
	dstSt, derr := lstatT(dst)
	if derr != nil && !isErrno(derr, syscall.ENOENT) {
		return derr
	}
	if derr != nil {
		dstSt = nil
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if dstSt != nil && !isDirMode(dstSt.Mode) {
			return cpErr("Cannot overwrite non-directory with directory", "EISDIR", "cannot overwrite non-directory "+dst+" with directory "+src, dst)
		}
		if dstSt == nil {
			if err := syscall.Mkdir(dst, 0o777); err != nil {
				return nodeErr("mkdir", dst, err)
			}
		}
		d, err := os.Open(src)
		if err != nil {
			return nodeErr("opendir", src, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return nodeErr("scandir", src, err)
		}
		for _, n := range names {
			if err := copyTree(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
				return err
			}
		}
		if dstSt == nil {
			return nodeErr("chmod", dst, os.Chmod(dst, os.FileMode(st.Mode&0o777)|unixSpecialBits(st.Mode)))
		}
		return nil
	case syscall.S_IFREG:
		if dstSt != nil {
			if isDirMode(dstSt.Mode) {
				return cpErr("Cannot overwrite directory with non-directory", "ENOTDIR", "cannot overwrite directory "+dst+" with non-directory "+src, dst)
			}
			if err := syscall.Unlink(dst); err != nil {
				return nodeErr("unlink", dst, err)
			}
		}
		in, err := os.Open(src)
		if err != nil {
			return nodeErr("copyfile", src, err)
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
			return nodeErr("utime", dst, err)
		}
		return nodeErr("chmod", dst, os.Chmod(dst, os.FileMode(st.Mode&0o777)|unixSpecialBits(st.Mode)))
	case syscall.S_IFLNK:
		link, err := os.Readlink(src)
		if err != nil {
			return nodeErr("readlink", src, err)
		}
		if dstSt != nil {
			if err := syscall.Unlink(dst); err != nil {
				return nodeErr("unlink", dst, err)
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

func unixSpecialBits(mode uint32) os.FileMode {
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
	if n := errnoOf(err); n != 0 {
		return &nodeFsError{errno: n, call: "copyfile", path: src, dest: dst}
	}
	return err
}

// removeErr words an os.RemoveAll failure as Node's fs.rm would.
func removeErr(err error) error {
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
	return nodeErr(call, pe.Path, pe.Err)
}

// fsLess orders names as JavaScript's `<` on strings does (UTF-16 code units).
func fsLess(a, b string) bool {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ka, kb := utf16Key(ra), utf16Key(rb)
			if ka != kb {
				return ka < kb
			}
			return ra < rb
		}
		a, b = a[na:], b[nb:]
	}
	return a == "" && b != ""
}

func utf16Key(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + ((r - 0x10000) >> 10)
	}
	return r
}

func (s *fsService) listInto(dir, display string, depth uint32, acc *Accounts, out *[]*fsEntry, isRoot bool) error {
	d, err := os.Open(dir)
	if err != nil {
		if isRoot {
			return nodeErr("scandir", dir, err)
		}
		return nil // unreadable or vanished subdirectory: skipped
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		if isRoot {
			return nodeErr("scandir", dir, err)
		}
		return nil
	}
	sort.Slice(names, func(i, j int) bool { return fsLess(names[i], names[j]) })
	for _, n := range names {
		abs := filepath.Join(dir, n)
		st, err := lstatT(abs)
		if err != nil {
			continue // vanished meanwhile
		}
		disp := filepath.Join(display, n)
		*out = append(*out, entryFromStat(abs, st, acc, disp))
		if depth > 1 && isDirMode(st.Mode) {
			s.listInto(abs, disp, depth-1, acc, out, false)
		}
	}
	return nil
}

func (s *fsService) listDir(c *Call) (interface{}, error) {
	f, err := fsDecode(c, "ListDirRequest")
	if err != nil {
		return nil, err
	}
	rp, err := f.str("path")
	if err != nil {
		return nil, err
	}
	depth, err := f.uint32("depth")
	if err != nil {
		return nil, err
	}
	p, _, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	if err := requireDir(p); err != nil {
		return nil, err
	}
	if depth < 1 {
		depth = 1
	}
	var out []*fsEntry
	if err := s.listInto(p, p, depth, s.env.Users.Accounts(), &out, true); err != nil {
		return nil, fsRPCError(err, p)
	}
	return fsListResponse{out}, nil
}

func (s *fsService) remove(c *Call) (interface{}, error) {
	f, err := fsDecode(c, "RemoveRequest")
	if err != nil {
		return nil, err
	}
	rp, err := f.str("path")
	if err != nil {
		return nil, err
	}
	p, _, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	// as Node's fs.rm(p, {recursive, force}): lstat first (a missing path is fine)
	if _, err := lstatT(p); err != nil {
		if isErrno(err, syscall.ENOENT) {
			return fsEmpty{}, nil
		}
		return nil, fsRPCError(err, p)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, fsRPCError(removeErr(err), p)
	}
	return fsEmpty{}, nil
}

// ---- watching ----

type watchRequest struct {
	path         string
	recursive    bool
	includeEntry bool
}

func decodeWatchRequest(c *Call, msg string) (*watchRequest, error) {
	f, err := fsDecode(c, msg)
	if err != nil {
		return nil, err
	}
	r := &watchRequest{}
	if r.path, err = f.str("path"); err != nil {
		return nil, err
	}
	if r.recursive, err = f.boolean("recursive"); err != nil {
		return nil, err
	}
	if r.includeEntry, err = f.boolean("includeEntry", "include_entry"); err != nil {
		return nil, err
	}
	if _, err = f.boolean("allowNetworkMounts", "allow_network_mounts"); err != nil {
		return nil, err
	}
	return r, nil
}

// startWatcher resolves and checks the directory, then watches it; events go to push.
func (s *fsService) startWatcher(c *Call, r *watchRequest, push func(fsEvent)) (*dirWatcher, error) {
	p, _, err := s.resolveFor(c, r.path)
	if err != nil {
		return nil, err
	}
	if err := requireDir(p); err != nil {
		return nil, err
	}
	w := newDirWatcher(p, r.recursive, r.includeEntry, s.env.Users, push)
	if err := w.start(); err != nil {
		w.Close()
		return nil, fsRPCError(err, p)
	}
	return w, nil
}

func (s *fsService) watchDir(c *Call, send func(msg interface{}) error) error {
	r, err := decodeWatchRequest(c, "WatchDirRequest")
	if err != nil {
		return err
	}
	q := newWatchQueue()
	w, err := s.startWatcher(c, r, q.push)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := send(fsWatchStart{}); err != nil {
		return err
	}
	// ends at the Connect-Timeout-Ms deadline or when the client goes away (no error: `{}`)
	interval := keepaliveInterval(c.Header)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	flush := func() (bool, error) {
		evs := q.take()
		for _, ev := range evs {
			if err := send(fsWatchEvent{ev}); err != nil {
				return false, err
			}
		}
		return len(evs) > 0, nil
	}
	for {
		sent, err := flush()
		if err != nil {
			return err
		}
		if sent {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(interval)
		}
		select {
		case <-c.Ctx.Done():
			_, err := flush()
			return err
		case <-q.wake:
		case <-timer.C:
			if q.len() == 0 {
				if err := send(fsWatchKeepalive{}); err != nil {
					return err
				}
			}
			timer.Reset(interval)
		}
	}
}

func (s *fsService) createWatcher(c *Call) (interface{}, error) {
	r, err := decodeWatchRequest(c, "CreateWatcherRequest")
	if err != nil {
		return nil, err
	}
	id, err := s.env.Watchers.create(func(push func(fsEvent)) (*dirWatcher, error) {
		return s.startWatcher(c, r, push)
	})
	if err != nil {
		return nil, err
	}
	return fsCreateWatcherResponse{id}, nil
}

func watcherIDOf(c *Call, msg string) (string, error) {
	f, err := fsDecode(c, msg)
	if err != nil {
		return "", err
	}
	return f.str("watcherId", "watcher_id")
}

func (s *fsService) getWatcherEvents(c *Call) (interface{}, error) {
	id, err := watcherIDOf(c, "GetWatcherEventsRequest")
	if err != nil {
		return nil, err
	}
	evs, err := s.env.Watchers.drain(id)
	if err != nil {
		return nil, err
	}
	return fsEventsResponse{evs}, nil
}

func (s *fsService) removeWatcher(c *Call) (interface{}, error) {
	id, err := watcherIDOf(c, "RemoveWatcherRequest")
	if err != nil {
		return nil, err
	}
	if err := s.env.Watchers.remove(id); err != nil {
		return nil, err
	}
	return fsEmpty{}, nil
}
