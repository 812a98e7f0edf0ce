// Package fslayer serves filesystem layers (a filesystem-only pause and its resume):
// POST /fs-layer/capture streams the sandbox's writable layer (what differs from the template
// tree bound read-only at /.aenv/lower) as a tar; POST /fs-layer/apply applies such a layer
// to / and answers its stats. Both ends write and read the same tar dialect, so a layer taken by either envd can
// be applied by the other.
//
// The tar dialect: ustar headers, a pax record ('x') only where a value does not fit (names
// or link targets of 100 bytes or more or not printable ASCII, sizes of 8 GiB or more, ids of
// 2^21 or more). Deletions are OCI whiteouts (an empty file `.wh.<name>`). Regular files,
// directories, symlinks and hard links only; no xattrs, no opaque-directory markers.
//
// The routes are served in http.go, a layer taken in capture.go, read in read.go and applied
// in apply.go, its system calls' errors worded in errors.go; the header blocks are written
// here.
package fslayer

import (
	"strconv"
	"unicode/utf8"
)

const (
	layerBlock = 512
	// layerWhiteoutPrefix marks a deletion: `.wh.<name>` deletes <name> in its folder.
	layerWhiteoutPrefix = ".wh."
	// sandboxLowerDir is where every sandbox sees its template's tree (@aenv/protocol).
	sandboxLowerDir = "/.aenv/lower"
)

// layerStats is what a capture or an apply covered (EnvdLayerStats).
type layerStats struct {
	Entries   int64 `json:"entries"`
	Whiteouts int64 `json:"whiteouts"`
	Bytes     int64 `json:"bytes"`
}

type layerType byte

const (
	layerNone layerType = iota // sockets, fifos, devices: never in a layer
	layerFile
	layerDir
	layerSymlink
	layerHardlink
)

var layerTypeflag = map[layerType]byte{layerFile: '0', layerHardlink: '1', layerSymlink: '2', layerDir: '5'}

// layerHeader is one entry. Path is relative to /, no leading slash, directories without a
// trailing one; Linkname is a symlink's target or a hard link's first path.
type layerHeader struct {
	Path     string
	Type     layerType
	Mode     int64
	UID, GID int64
	Size     int64
	Mtime    int64 // seconds
	Linkname string
}

// layerOctal writes value as len-1 zero-padded octal digits and a NUL.
func layerOctal(b []byte, value int64) {
	s := strconv.FormatInt(value, 8)
	n := len(b) - 1
	for i := 0; i < n-len(s); i++ {
		b[i] = '0'
	}
	copy(b[n-len(s):n], s)
	b[n] = 0
}

func layerFitsOctal(value int64, length int) bool {
	return value >= 0 && value < int64(1)<<(3*uint(length-1))
}

// layerPutString writes s into field, cut at the field's end but never inside a UTF-8
// character (as Node's Buffer.write).
func layerPutString(field []byte, s string) {
	if len(s) > len(field) {
		n := 0
		for n < len(s) {
			_, size := utf8.DecodeRuneInString(s[n:])
			if n+size > len(field) {
				break
			}
			n += size
		}
		s = s[:n]
	}
	copy(field, s)
}

func layerRawHeader(name string, typeflag byte, mode, uid, gid, size, mtime int64, linkname string) []byte {
	b := make([]byte, layerBlock)
	layerPutString(b[0:100], name)
	layerOctal(b[100:108], mode&07777)
	if !layerFitsOctal(uid, 8) {
		uid = 0
	}
	if !layerFitsOctal(gid, 8) {
		gid = 0
	}
	if !layerFitsOctal(size, 12) {
		size = 0
	}
	if !layerFitsOctal(mtime, 12) {
		mtime = 0
	}
	layerOctal(b[108:116], uid)
	layerOctal(b[116:124], gid)
	layerOctal(b[124:136], size)
	layerOctal(b[136:148], mtime)
	b[156] = typeflag
	layerPutString(b[157:257], linkname)
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	sum := int64(0)
	for _, c := range b {
		sum += int64(c)
	}
	layerOctal(b[148:155], sum)
	b[155] = ' '
	return b
}

// layerShortASCII: fits a ustar field as is (under max bytes, printable ASCII).
func layerShortASCII(s string, max int) bool {
	if len(s) >= max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// layerPaxRecord is "<len> <key>=<value>\n", the length counting itself.
func layerPaxRecord(key, value string) string {
	body := " " + key + "=" + value + "\n"
	n := len(body)
	for len(strconv.Itoa(n))+len(body) != n {
		n = len(strconv.Itoa(n)) + len(body)
	}
	return strconv.Itoa(n) + body
}

func layerPadding(size int64) int64 {
	return (layerBlock - size%layerBlock) % layerBlock
}

// encodeLayerHeader gives the header block(s) of one entry: a pax record first when a value
// does not fit ustar.
//
// One deliberate difference from the Node writer: the ustar name field keeps the name
// whenever the name itself fits (Node's leaves it empty as soon as any pax record is
// written, so a symlink with a long target, a hard link to a long path, a file of 8 GiB or
// more or one owned by an id of 2^21 or more lost its name and was dropped by both readers).
// Both readers take the name from that field when the pax record has no path.
func encodeLayerHeader(h *layerHeader) []byte {
	name := h.Path
	if h.Type == layerDir {
		name += "/"
	}
	var pax []byte
	headerName := name
	if !layerShortASCII(name, 100) {
		pax = append(pax, layerPaxRecord("path", name)...)
		headerName = ""
	}
	if !layerShortASCII(h.Linkname, 100) {
		pax = append(pax, layerPaxRecord("linkpath", h.Linkname)...)
	}
	if !layerFitsOctal(h.Size, 12) {
		pax = append(pax, layerPaxRecord("size", strconv.FormatInt(h.Size, 10))...)
	}
	if !layerFitsOctal(h.UID, 8) {
		pax = append(pax, layerPaxRecord("uid", strconv.FormatInt(h.UID, 10))...)
	}
	if !layerFitsOctal(h.GID, 8) {
		pax = append(pax, layerPaxRecord("gid", strconv.FormatInt(h.GID, 10))...)
	}
	main := layerRawHeader(headerName, layerTypeflag[h.Type], h.Mode, h.UID, h.GID, h.Size, h.Mtime, h.Linkname)
	if len(pax) == 0 {
		return main
	}
	n := int64(len(pax))
	out := make([]byte, 0, layerBlock+n+layerPadding(n)+layerBlock)
	out = append(out, layerRawHeader("PaxHeader", 'x', 0o644, 0, 0, n, 0, "")...)
	out = append(out, pax...)
	out = append(out, make([]byte, layerPadding(n))...)
	return append(out, main...)
}
