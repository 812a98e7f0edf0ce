package filesystem

// filesystem.EntryInfo from a file's lstat: type, mode bits, owner and group names, mtime,
// symlink target, user.e2b.* metadata.

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	fspb "aenv/envd/internal/gen/filesystem"
	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/users"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// goModeString is Go's os.FileMode.String() for a Unix st_mode.
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

func fileTypeOf(mode uint32) fspb.FileType {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		return fspb.FileType_FILE_TYPE_SYMLINK
	case syscall.S_IFDIR:
		return fspb.FileType_FILE_TYPE_DIRECTORY
	case syscall.S_IFREG:
		return fspb.FileType_FILE_TYPE_FILE
	}
	return fspb.FileType_FILE_TYPE_UNSPECIFIED
}

// msTimestamp is a time in whole milliseconds (mtimeMs floored, as the SDK's clients have
// always seen it) as a google.protobuf.Timestamp.
func msTimestamp(ms float64) *timestamppb.Timestamp {
	m := int64(math.Floor(ms))
	sec := m / 1000
	if m%1000 < 0 {
		sec--
	}
	return &timestamppb.Timestamp{Seconds: sec, Nanos: int32((m - sec*1000) * 1e6)}
}

// entryFromStat builds abs's EntryInfo from its lstat result; displayPath is the path reported.
func entryFromStat(abs string, st *syscall.Stat_t, acc *users.Accounts, displayPath string) *fspb.EntryInfo {
	name := filepath.Base(displayPath)
	if name == "" || name == "." {
		name = "/"
	}
	e := &fspb.EntryInfo{
		Name:         name,
		Type:         fileTypeOf(st.Mode),
		Path:         displayPath,
		Size:         st.Size,
		Mode:         st.Mode & 0o777,
		Permissions:  goModeString(st.Mode),
		ModifiedTime: msTimestamp(nodefs.MtimeMs(st)),
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
		// As E2B's envd reports a link: the type and mode of what it resolves to, with the
		// resolved path as its target; a link that resolves to nothing names itself as its
		// target and has no type (unspecified) and mode 0.
		e.Type = fspb.FileType_FILE_TYPE_UNSPECIFIED
		e.Mode = 0
		t := absClean(abs)
		if resolved, err := filepath.EvalSymlinks(abs); err == nil {
			t = absClean(resolved)
			var target syscall.Stat_t
			if syscall.Stat(t, &target) == nil {
				e.Type = fileTypeOf(target.Mode)
				e.Mode = target.Mode & 0o777
			}
		}
		e.SymlinkTarget = &t
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

// entry: lstat + EntryInfo; the lstat error as is (ENOENT etc.).
func (s *Service) entry(abs string) (*fspb.EntryInfo, error) {
	st, err := nodefs.Lstat(abs)
	if err != nil {
		return nil, err
	}
	return entryFromStat(abs, st, s.users.DB.Accounts(), abs), nil
}
