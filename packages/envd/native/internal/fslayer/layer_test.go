package fslayer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// describeLayerTree lists every path under dir with what a layer must keep of it.
func describeLayerTree(t *testing.T, dir, rel string) []string {
	t.Helper()
	var out []string
	names := layerList(filepath.Join(dir, rel))
	for _, name := range names {
		p := layerChild(rel, name)
		st := layerLstat(filepath.Join(dir, p))
		if layerTypeOf(st) == layerNone {
			continue // never in a layer
		}
		what := "dir"
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			l, _ := os.Readlink(filepath.Join(dir, p))
			what = "-> " + l
		case syscall.S_IFREG:
			b, _ := os.ReadFile(filepath.Join(dir, p))
			what = string(b)
		}
		out = append(out, fmt.Sprintf("%s %o %d:%d %d %s", p, st.Mode&07777, st.Uid, st.Gid, st.Mtim.Sec, what))
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			out = append(out, describeLayerTree(t, dir, p)...)
		}
	}
	return out
}

// chunked reads b in pieces of n bytes: record boundaries must not matter.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	if len(p) > c.n {
		p = p[:c.n]
	}
	k := copy(p, c.b)
	c.b = c.b[k:]
	return k, nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func needRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("sets owners: needs root")
	}
}

func TestLayerRoundTrip(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	lower, root := filepath.Join(tmp, "lower"), filepath.Join(tmp, "root")
	must(t, os.MkdirAll(filepath.Join(lower, "a"), 0o755))
	must(t, os.Mkdir(filepath.Join(lower, "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(lower, "a/keep.txt"), []byte("old"), 0o644))
	must(t, os.WriteFile(filepath.Join(lower, "a/gone.txt"), []byte("gone"), 0o644))
	must(t, os.WriteFile(filepath.Join(lower, "b/c.txt"), []byte("c"), 0o644))
	must(t, os.WriteFile(filepath.Join(lower, "t"), []byte("file that becomes a folder"), 0o644))
	must(t, os.WriteFile(filepath.Join(lower, "same.txt"), []byte("same"), 0o644))
	time.Sleep(30 * time.Millisecond)

	must(t, os.MkdirAll(filepath.Join(root, "a"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "a/keep.txt"), []byte("new contents"), 0o644))
	must(t, os.Mkdir(filepath.Join(root, "t"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "t/inner.txt"), []byte("inner"), 0o644))
	must(t, os.Link(filepath.Join(lower, "same.txt"), filepath.Join(root, "same.txt")))
	long := strings.Repeat("long-name-", 15) + "ü ñ.txt"
	must(t, os.WriteFile(filepath.Join(root, "a", long), []byte("long"), 0o644))
	must(t, os.Symlink("../t/inner.txt", filepath.Join(root, "a/link")))
	must(t, os.Symlink(strings.Repeat("x/", 80)+"target", filepath.Join(root, "a/longlink")))
	must(t, os.WriteFile(filepath.Join(root, "a/h1"), []byte("hard"), 0o644))
	must(t, os.Link(filepath.Join(root, "a/h1"), filepath.Join(root, "a/h2")))
	must(t, os.WriteFile(filepath.Join(root, "a/suid"), []byte("x"), 0o644))
	must(t, os.Chown(filepath.Join(root, "a/suid"), 1234, 5678))
	must(t, syscall.Chmod(filepath.Join(root, "a/suid"), 0o4755))
	must(t, os.WriteFile(filepath.Join(root, "a/bigid"), []byte("big"), 0o644))
	must(t, os.Chown(filepath.Join(root, "a/bigid"), 3000000, 3000001))
	must(t, syscall.Mkfifo(filepath.Join(root, "a/fifo"), 0o644))
	must(t, os.Chmod(filepath.Join(root, "t"), 0o700))
	must(t, os.Chtimes(filepath.Join(root, "a/keep.txt"), time.Unix(981173106, 0), time.Unix(981173106, 0)))

	var layer bytes.Buffer
	stats := &layerStats{}
	must(t, captureLayer(&layer, root, lower, "", stats))
	if layer.Len()%512 != 0 {
		t.Fatalf("layer of %d bytes", layer.Len())
	}
	if bytes.Contains(layer.Bytes(), []byte("same.txt")) {
		t.Fatal("an unchanged file is in the layer")
	}
	if stats.Whiteouts != 3 {
		t.Fatalf("whiteouts %d", stats.Whiteouts)
	}

	target := filepath.Join(tmp, "target")
	must(t, exec.Command("cp", "-a", lower, target).Run())
	applied, err := applyLayer(&chunked{layer.Bytes(), 700}, target)
	must(t, err)
	if applied.Whiteouts != 3 || applied.Entries != stats.Entries || applied.Bytes != stats.Bytes {
		t.Fatalf("applied %+v, captured %+v", applied, stats)
	}
	want, got := describeLayerTree(t, root, ""), describeLayerTree(t, target, "")
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("tree differs:\nwant\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	s1, s2 := layerLstat(filepath.Join(target, "a/h1")), layerLstat(filepath.Join(target, "a/h2"))
	if s1.Ino != s2.Ino {
		t.Fatal("hard link lost")
	}
}

func TestLayerCutShort(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	must(t, os.Mkdir(root, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "f"), bytes.Repeat([]byte("x"), 5000), 0o644))
	var layer bytes.Buffer
	must(t, captureLayer(&layer, root, filepath.Join(tmp, "none"), "", &layerStats{}))
	for _, c := range []struct {
		n   int
		msg string
	}{
		{2048, "layer ends in the middle of a file"},
		{700, "layer ends in the middle of a file"},
		{300, "layer ends in the middle of a record"},
		{512 + 5120, "layer ends without an end-of-archive marker"},
		{0, "layer ends without an end-of-archive marker"},
	} {
		target := t.TempDir()
		_, err := applyLayer(bytes.NewReader(layer.Bytes()[:c.n]), target)
		if err == nil || err.Error() != c.msg {
			t.Fatalf("cut at %d: %v", c.n, err)
		}
	}
	_, err := applyLayer(bytes.NewReader(append(layerRawHeader("x", 'g', 0, 0, 0, 0, 0, ""), make([]byte, 1024)...)), t.TempDir())
	if err == nil || err.Error() != "layer entry of unsupported type 'g'" {
		t.Fatal(err)
	}
}

func TestLayerHostile(t *testing.T) {
	tmp := t.TempDir()
	target := filepath.Join(tmp, "hostile")
	must(t, os.Mkdir(target, 0o755))
	must(t, os.WriteFile(filepath.Join(tmp, "victim"), []byte("v"), 0o644))
	f := func(p string) []byte { return encodeLayerHeader(&layerHeader{Path: p, Type: layerFile, Mode: 0o644}) }
	l := func(p, to string) []byte {
		return encodeLayerHeader(&layerHeader{Path: p, Type: layerSymlink, Mode: 0o777, Linkname: to})
	}
	var layer []byte
	for _, b := range [][]byte{
		f("../escaped"), f("proc/x"), f(".aenv/x"), f("/abs"), f("a/./b"), f("ok"),
		l("up", "../.."), l("abs", "/"), l("aenv", "/.aenv"), l("loop", "loop"),
		f("up/escaped2"), f("abs/escaped3"), f("up/.wh.victim"), f("up/" + filepath.Base(tmp) + "/.wh.victim"),
		f("aenv/x"), f("up/proc"),
		make([]byte, 1024),
	} {
		layer = append(layer, b...)
	}
	stats, err := applyLayer(bytes.NewReader(layer), target)
	must(t, err)
	got := layerList(target)
	sort.Strings(got)
	if strings.Join(got, ",") != "abs,aenv,escaped2,escaped3,loop,ok,up" {
		t.Fatalf("target holds %v", got)
	}
	if _, err := os.Stat(filepath.Join(tmp, "victim")); err != nil {
		t.Fatal("a whiteout through a symlink removed a file outside the root")
	}
	if layerLstat(filepath.Join(tmp, "escaped")) != nil || layerLstat(filepath.Join(tmp, "escaped2")) != nil {
		t.Fatal("escaped")
	}
	if stats.Whiteouts != 2 {
		t.Fatalf("%+v", stats)
	}
	// A hard link to a file outside the root (through a symlink): up/victim is the root's.
	hl := encodeLayerHeader(&layerHeader{Path: "hl", Type: layerHardlink, Linkname: "up/victim"})
	_, err = applyLayer(bytes.NewReader(append(hl, make([]byte, 1024)...)), target)
	if err == nil || !strings.HasPrefix(err.Error(), "ENOENT: ") || layerLstat(filepath.Join(tmp, "victim")).Nlink != 1 {
		t.Fatal(err)
	}
	// A symlink loop as a parent folder: an error, as the kernel's ELOOP in Node's.
	_, err = applyLayer(bytes.NewReader(append(f("loop/x"), make([]byte, 1024)...)), target)
	if err == nil || !strings.HasPrefix(err.Error(), "ELOOP: ") {
		t.Fatal(err)
	}
}

func TestLayerMounts(t *testing.T) {
	m := parseLayerMounts(strings.Join([]string{
		"1 0 0:1 / / rw - 9p none rw",
		"2 1 0:2 / /tmp rw - tmpfs none rw",
		"3 1 0:3 / /etc/resolv.conf ro - 9p none ro",
		`4 1 0:4 / /my\040vol rw - 9p none rw`,
		"5 1 0:5 / /opt rw shared:1 - ext4 /dev/x rw",
		"garbage",
	}, "\n"))
	if len(m.whole) != 1 || !m.whole["tmp"] {
		t.Fatal(m.whole)
	}
	if len(m.skip) != 3 || !m.skip["etc/resolv.conf"] || !m.skip["my vol"] || !m.skip["opt"] {
		t.Fatal(m.skip)
	}
}

func TestLayerNameOrder(t *testing.T) {
	names := []string{"Ａ", "😀", "z", "ä", "a", "B", "ab", ""}
	sort.Slice(names, func(i, j int) bool { return layerNameLess(names[i], names[j]) })
	// JavaScript's order: by UTF-16 code units (U+1F600 is D83D DE00, before U+FF21).
	if strings.Join(names, ",") != ",B,a,ab,z,ä,😀,Ａ" {
		t.Fatal(names)
	}
}

func TestLayerHeaderNames(t *testing.T) {
	// A name that fits stays in the ustar field even when another value needs a pax record.
	b := encodeLayerHeader(&layerHeader{Path: "a/link", Type: layerSymlink, Mode: 0o777, Linkname: strings.Repeat("x", 120)})
	if len(b) != 3*512 || layerStr(b[1024:1124]) != "a/link" || !bytes.Contains(b[512:1024], []byte(" linkpath=xxx")) {
		t.Fatalf("%q", b)
	}
	lr := newLayerReader(bytes.NewReader(append(b, make([]byte, 1024)...)))
	h, err := lr.next()
	must(t, err)
	if h.Path != "a/link" || h.Linkname != strings.Repeat("x", 120) || h.Type != layerSymlink {
		t.Fatalf("%+v", h)
	}
	// Cut inside no UTF-8 character.
	b = encodeLayerHeader(&layerHeader{Path: "l", Type: layerSymlink, Linkname: strings.Repeat("x", 99) + "ü"})
	if b[512+157+99] != 0 {
		t.Fatalf("%q", b[512+157:512+257])
	}
}
