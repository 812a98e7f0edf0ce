package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestErrorWording(t *testing.T) {
	dir := t.TempDir()
	_, err := Lstat(filepath.Join(dir, "nope"))
	if err == nil || err.Error() != "ENOENT: no such file or directory, lstat '"+dir+"/nope'" || !IsErrno(err, syscall.ENOENT) {
		t.Fatalf("%v", err)
	}
	if Wrap("open", "/x", err) != err {
		t.Fatal("an already worded error is kept")
	}
	plain := errors.New("plain")
	if Wrap("open", "/x", plain) != plain || Wrap("open", "/x", nil) != nil {
		t.Fatal("errors without an errno pass")
	}
	e := &Error{Errno: syscall.ENOSPC, Call: "watch", Path: "/d", Text: "System limit for number of file watchers reached"}
	if e.Error() != "ENOSPC: System limit for number of file watchers reached, watch '/d'" {
		t.Fatal(e.Error())
	}
	e = &Error{Errno: syscall.EXDEV, Call: "rename", Path: "/a", Dest: "/b"}
	if e.Error() != "EXDEV: cross-device link not permitted, rename '/a' -> '/b'" || Errno(e) != syscall.EXDEV {
		t.Fatal(e.Error())
	}
}

func TestMkdirp(t *testing.T) {
	dir := t.TempDir()
	first, err := Mkdirp(filepath.Join(dir, "a/b/c"))
	if err != nil || first != filepath.Join(dir, "a") {
		t.Fatalf("the first directory made: %q %v", first, err)
	}
	if first, err = Mkdirp(filepath.Join(dir, "a/b")); err != nil || first != "" {
		t.Fatalf("nothing made: %q %v", first, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o644))
	if _, err = Mkdirp(filepath.Join(dir, "f")); !IsErrno(err, syscall.EEXIST) || err.Error() != "EEXIST: file already exists, mkdir '"+dir+"/f'" {
		t.Fatalf("a file at the path: %v", err)
	}
	if _, err = Mkdirp(filepath.Join(dir, "f/g")); !IsErrno(err, syscall.ENOTDIR) {
		t.Fatalf("a file as a parent: %v", err)
	}
}

func TestCopyTree(t *testing.T) {
	src, dst := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "dst")
	must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "sub/f"), []byte("data"), 0o640))
	must(t, os.Symlink("sub/f", filepath.Join(src, "link")))
	old := time.Unix(1_000_000_000, 0)
	must(t, os.Chtimes(filepath.Join(src, "sub/f"), old.Add(time.Hour), old))
	must(t, syscall.Chmod(filepath.Join(src, "sub"), 0o1750))
	must(t, CopyTree(src, dst))
	st, err := os.Stat(filepath.Join(dst, "sub/f"))
	if err != nil || st.Mode().Perm() != 0o640 || !st.ModTime().Equal(old) {
		t.Fatalf("file: %v %v", st, err)
	}
	if st, err = os.Stat(filepath.Join(dst, "sub")); err != nil || st.Mode()&os.ModeSticky == 0 {
		t.Fatalf("a directory's mode, special bits too: %v %v", st, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "sub/f" {
		t.Fatalf("symlinks are copied verbatim: %q %v", l, err)
	}
	// Onto an existing tree: files replaced, directories merged.
	must(t, os.WriteFile(filepath.Join(src, "sub/f"), []byte("new"), 0o640))
	must(t, os.WriteFile(filepath.Join(dst, "sub/kept"), nil, 0o644))
	must(t, CopyTree(src, dst))
	if b, _ := os.ReadFile(filepath.Join(dst, "sub/f")); string(b) != "new" {
		t.Fatalf("replaced: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dst, "sub/kept")); err != nil {
		t.Fatal("merged: ", err)
	}
	err = CopyTree(src, filepath.Join(dst, "sub/f"))
	if err == nil || Errno(err) != 0 || err.Error() != "Cannot overwrite non-directory with directory: cp returned EISDIR (cannot overwrite non-directory "+dst+"/sub/f with directory "+src+") "+dst+"/sub/f" {
		t.Fatalf("a directory onto a file: %v", err)
	}
}

func TestRemoveError(t *testing.T) {
	err := RemoveError(&os.PathError{Op: "unlinkat", Path: "/d/f", Err: syscall.EACCES})
	if err.Error() != "EACCES: permission denied, unlink '/d/f'" {
		t.Fatal(err)
	}
	plain := errors.New("plain")
	if RemoveError(plain) != plain {
		t.Fatal("other errors pass")
	}
}
