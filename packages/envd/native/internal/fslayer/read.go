package fslayer

// Reading a filesystem layer (a tar stream as capture.go writes it): headers, pax
// records and numbers parsed as the layer's readers always have, entries of other types refused.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

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
