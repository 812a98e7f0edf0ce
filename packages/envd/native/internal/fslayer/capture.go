package fslayer

// Taking a sandbox's writable filesystem layer: `/` compared
// with the template tree bound read-only at sandboxLowerDir. gVisor's overlay gives a file
// copied up to its writable layer a new ctime and leaves the lower file's ctime on everything
// else, so an entry whose ctime matches the lower one is unchanged, and so is everything
// under such a directory (a change anywhere copies up every ancestor): only copied-up
// directories are walked.

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"
)

// layerSkipped is never part of a layer: kernel and runtime filesystems, envd's own mounts.
var layerSkipped = []string{"proc", "sys", "dev", ".aenv"}

type layerMounts struct {
	// skip: mount points (relative to /) whose contents are not the sandbox's files.
	skip map[string]bool
	// whole: tmpfs mounts gVisor adds (/tmp): taken whole, they hide the lower tree in every boot.
	whole map[string]bool
}

func layerUnescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && layerIsOctal3(s[i+1:]) {
			v := (int(s[i+1]-'0') << 6) | (int(s[i+2]-'0') << 3) | int(s[i+3]-'0')
			if v < 256 {
				b.WriteByte(byte(v))
			} else {
				b.WriteRune(rune(v))
			}
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func layerIsOctal3(s string) bool {
	if len(s) < 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}

// parseLayerMounts sorts the sandbox's mounts (/proc/self/mountinfo) into skipped and
// taken whole.
func parseLayerMounts(mountinfo string) layerMounts {
	m := layerMounts{skip: map[string]bool{}, whole: map[string]bool{}}
	for _, line := range strings.Split(mountinfo, "\n") {
		halves := strings.SplitN(line, " - ", 3)
		if len(halves) < 2 {
			continue
		}
		fields := strings.Split(halves[0], " ")
		if len(fields) < 5 {
			continue
		}
		point := fields[4]
		fstype := strings.Split(halves[1], " ")[0]
		if point == "" || fstype == "" || point == "/" {
			continue
		}
		rel := strings.TrimLeft(layerUnescapeOctal(point), "/")
		if fstype == "tmpfs" {
			m.whole[rel] = true
		} else {
			m.skip[rel] = true
		}
	}
	return m
}

func readLayerMountinfo() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	return string(b)
}

func layerTypeOf(st *syscall.Stat_t) layerType {
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return layerFile
	case syscall.S_IFDIR:
		return layerDir
	case syscall.S_IFLNK:
		return layerSymlink
	}
	// Sockets, fifos and devices have no contents worth keeping (a boot makes its own).
	return layerNone
}

// layerSameEntry: not copied up (same ctime and, for good measure, the same visible metadata).
func layerSameEntry(lower, upper *syscall.Stat_t) bool {
	return lower.Ctim.Sec == upper.Ctim.Sec && lower.Ctim.Nsec == upper.Ctim.Nsec &&
		lower.Mtim.Sec == upper.Mtim.Sec && lower.Mtim.Nsec == upper.Mtim.Nsec &&
		lower.Mode == upper.Mode && lower.Uid == upper.Uid && lower.Gid == upper.Gid &&
		(lower.Mode&syscall.S_IFMT == syscall.S_IFDIR || lower.Size == upper.Size)
}

// layerMtime is the mtime in whole seconds, truncated toward zero as Node's
// `mtimeMs / 1000n` (negative ones are written as 0 either way).
func layerMtime(st *syscall.Stat_t) int64 {
	sec, nsec := int64(st.Mtim.Sec), int64(st.Mtim.Nsec)
	if sec < 0 && nsec > 0 {
		sec++
	}
	return sec
}

// layerUnitKey is the first UTF-16 code unit of r (what JavaScript compares strings by).
func layerUnitKey(r rune) rune {
	if r >= 0x10000 {
		return 0xd800 + ((r - 0x10000) >> 10)
	}
	return r
}

// layerNameLess orders names as JavaScript's default sort (by UTF-16 code units): the order
// layers have always been written in, so a capture's bytes do not depend on the envd's build.
func layerNameLess(a, b string) bool {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) || i == len(b) {
		return len(a) < len(b)
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return a[i] < b[i]
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if ra == rb {
		return a < b
	}
	if ka, kb := layerUnitKey(ra), layerUnitKey(rb); ka != kb {
		return ka < kb
	}
	return ra < rb
}

// layerList reads a directory's names, sorted; none when it cannot be read.
func layerList(dir string) []string {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil
		}
		if n <= 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	sort.Slice(names, func(i, j int) bool { return layerNameLess(names[i], names[j]) })
	return names
}

func layerLstat(p string) *syscall.Stat_t {
	var st syscall.Stat_t
	for {
		err := syscall.Lstat(p, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil
		}
		return &st
	}
}

type layerCapture struct {
	root, lower string
	lowerRel    string
	mounts      layerMounts
	// links: the first path of each multiply-linked file, by inode; later names become hard links.
	links map[[2]uint64]string
	stats *layerStats
	w     io.Writer
	buf   []byte
}

// captureLayer writes the layer of root against lower to w; stats is filled in as it goes.
// mountinfo is /proc/self/mountinfo's text ("" for none). An error means the layer written
// so far is incomplete (the caller must cut the stream).
func captureLayer(w io.Writer, root, lower, mountinfo string, stats *layerStats) error {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	absLower, err := filepath.Abs(lower)
	if err != nil {
		return err
	}
	lowerRel, err := filepath.Rel(absRoot, absLower)
	if err != nil {
		lowerRel = absLower
	}
	if lowerRel == "." {
		lowerRel = ""
	}
	c := &layerCapture{
		root:     root,
		lower:    lower,
		lowerRel: lowerRel,
		mounts:   parseLayerMounts(mountinfo),
		links:    map[[2]uint64]string{},
		stats:    stats,
		w:        w,
	}
	if err := c.dir("", false); err != nil {
		return err
	}
	_, err = w.Write(make([]byte, 2*layerBlock))
	return err
}

func (c *layerCapture) skipped(rel string) bool {
	for _, s := range layerSkipped {
		if rel == s || strings.HasPrefix(rel, s+"/") {
			return true
		}
	}
	return c.mounts.skip[rel] || rel == c.lowerRel || strings.HasPrefix(rel, c.lowerRel+"/")
}

func layerChild(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

func (c *layerCapture) write(b []byte) error {
	_, err := c.w.Write(b)
	return err
}

// whiteout writes the entry that deletes name in folder rel (an empty file `.wh.<name>`).
func (c *layerCapture) whiteout(rel, name string) error {
	c.stats.Whiteouts++
	return c.write(encodeLayerHeader(&layerHeader{
		Path: layerChild(rel, layerWhiteoutPrefix+name),
		Type: layerFile,
		Mode: 0o600,
	}))
}

// dir writes a directory of the writable layer: its deletions, then what changed in it.
func (c *layerCapture) dir(rel string, whole bool) error {
	names := layerList(filepath.Join(c.root, rel))
	if !whole {
		here := make(map[string]bool, len(names))
		for _, n := range names {
			here[n] = true
		}
		for _, name := range layerList(filepath.Join(c.lower, rel)) {
			if here[name] || c.skipped(layerChild(rel, name)) {
				continue
			}
			if err := c.whiteout(rel, name); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		child := layerChild(rel, name)
		if c.skipped(child) {
			continue
		}
		st := layerLstat(filepath.Join(c.root, child))
		if st == nil {
			continue // gone meanwhile
		}
		takeWhole := whole || c.mounts.whole[child]
		var lst *syscall.Stat_t
		if !takeWhole {
			lst = layerLstat(filepath.Join(c.lower, child))
		}
		if lst != nil && layerSameEntry(lst, st) {
			continue
		}
		if lst != nil && layerTypeOf(lst) != layerTypeOf(st) {
			// A file that became a directory (or the reverse): the lower one goes first.
			if err := c.whiteout(rel, name); err != nil {
				return err
			}
		}
		if err := c.entry(child, st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			if err := c.dir(child, takeWhole); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *layerCapture) entry(rel string, st *syscall.Stat_t) error {
	typ := layerTypeOf(st)
	if typ == layerNone {
		return nil
	}
	abs := filepath.Join(c.root, rel)
	h := layerHeader{
		Path:  rel,
		Type:  typ,
		Mode:  int64(st.Mode & 07777),
		UID:   int64(st.Uid),
		GID:   int64(st.Gid),
		Mtime: layerMtime(st),
	}
	if typ == layerSymlink {
		target, err := os.Readlink(abs)
		if err != nil {
			return err
		}
		h.Linkname = target
	}
	if typ == layerFile && uint64(st.Nlink) > 1 {
		key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if first, ok := c.links[key]; ok {
			c.stats.Entries++
			h.Type, h.Linkname = layerHardlink, first
			return c.write(encodeLayerHeader(&h))
		}
		c.links[key] = rel
	}
	if typ != layerFile {
		c.stats.Entries++
		return c.write(encodeLayerHeader(&h))
	}
	h.Size = st.Size
	c.stats.Entries++
	c.stats.Bytes += h.Size
	if err := c.write(encodeLayerHeader(&h)); err != nil {
		return err
	}
	return c.contents(abs, h.Size)
}

// contents writes exactly size bytes of the file: one that shrank meanwhile is padded with
// zeros, one that grew cut; one gone or unreadable meanwhile is all zeros.
func (c *layerCapture) contents(abs string, size int64) error {
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	left := size
	fd, err := syscall.Open(abs, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err == nil {
		defer syscall.Close(fd)
		for left > 0 {
			n := int64(len(c.buf))
			if left < n {
				n = left
			}
			k, err := syscall.Pread(fd, c.buf[:n], size-left)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return &os.PathError{Op: "read", Path: abs, Err: err}
			}
			if k <= 0 {
				break
			}
			left -= int64(k)
			if err := c.write(c.buf[:k]); err != nil {
				return err
			}
		}
	}
	zeros := left + layerPadding(size)
	for zeros > 0 {
		n := int64(len(c.buf))
		if zeros < n {
			n = zeros
		}
		for i := range c.buf[:n] {
			c.buf[i] = 0
		}
		if err := c.write(c.buf[:n]); err != nil {
			return err
		}
		zeros -= n
	}
	return nil
}
