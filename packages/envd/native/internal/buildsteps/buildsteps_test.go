package buildsteps

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCopyStep(t *testing.T) {
	root, dest := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "app", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "app", "a.txt"), []byte("a"), 0o600))
	must(os.WriteFile(filepath.Join(root, "app", "sub", "b.txt"), []byte("b"), 0o600))
	must(os.Symlink("a.txt", filepath.Join(root, "app", "link")))

	// a folder's contents merge into dest; owner and mode apply to all but symlinks
	must(copyStep(root, "app", dest, "1234", "750"))
	for _, p := range []string{"", "a.txt", "sub", "sub/b.txt", "link"} {
		var st syscall.Stat_t
		must(syscall.Lstat(filepath.Join(dest, p), &st))
		if st.Uid != 1234 || st.Gid != 1234 {
			t.Errorf("%s: owner %d:%d", p, st.Uid, st.Gid)
		}
		if p != "link" && st.Mode&0o7777 != 0o750 {
			t.Errorf("%s: mode %o", p, st.Mode&0o7777)
		}
	}
	if l, _ := os.Readlink(filepath.Join(dest, "link")); l != "a.txt" {
		t.Errorf("the symlink is copied verbatim, got %q", l)
	}
	// a glob lands in a folder named by dest, which is made
	into := filepath.Join(dest, "globbed") + "/"
	must(copyStep(root, "app/*.txt", into, "", ""))
	if b, _ := os.ReadFile(filepath.Join(into, "a.txt")); string(b) != "a" {
		t.Errorf("glob copy: %q", b)
	}
	// one file onto a new name
	must(copyStep(root, "app/sub/b.txt", filepath.Join(dest, "renamed"), "", ""))
	if b, _ := os.ReadFile(filepath.Join(dest, "renamed")); string(b) != "b" {
		t.Errorf("file copy: %q", b)
	}
	if err := copyStep(root, "nope", dest, "", ""); err == nil {
		t.Error("a missing source must fail")
	}
	if err := copyStep(root, "app", dest, "no-such-user-here", ""); err == nil {
		t.Error("an unknown owner must fail")
	}
}
