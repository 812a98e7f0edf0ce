// Package buildsteps holds the template build steps that the server runs inside a build
// sandbox as
// `/.aenv/bin/envd --aenv-build-step NAME ARGS…` (packages/server/src/templates/in-sandbox.ts):
// COPY, USER's account, WORKDIR's folder, and a file test. Inside the sandbox, paths are
// resolved by its own kernel (gVisor), so a symlink in an image can never point a COPY or an
// account change outside the rootfs, and no tool (cp, useradd) has to exist in the image.
// A failure is one line on stderr and exit status 1.
package buildsteps

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"aenv/envd/internal/nodefs"
)

// Flag, as envd's first argument, makes the process run one step (Main with the arguments
// after it) instead of the daemon.
const Flag = "--aenv-build-step"

// Main runs step with args and answers the exit status.
func Main(step string, args []string) int {
	var err error
	switch {
	case step == "exists" && len(args) == 1:
		if _, e := os.Stat(args[0]); e != nil {
			return 1
		}
		return 0
	case step == "mkdir" && len(args) == 1:
		err = os.MkdirAll(args[0], 0o777)
	case step == "ensure-user" && len(args) == 1:
		err = ensureUser(args[0])
	case step == "copy" && len(args) == 5:
		err = copyStep(args[0], args[1], args[2], args[3], args[4])
	default:
		err = fmt.Errorf("unknown build step %q with %d arguments", step, len(args))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func readOr(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// account is a COPY --chown owner: "" is root, digits are uid = gid, a name is looked up.
func account(name string) (int, int, error) {
	if name == "" {
		return 0, 0, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, n, nil
	}
	for _, l := range nonEmptyLines(readOr("/etc/passwd")) {
		f := strings.Split(l, ":")
		if len(f) > 3 && f[0] == name {
			uid, e1 := strconv.Atoi(f[2])
			gid, e2 := strconv.Atoi(f[3])
			if e1 == nil && e2 == nil {
				return uid, gid, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("COPY: no such user '%s'", name)
}

// ensureUser creates the account (the first free uid from 1000, a group of the same id and
// a home) when the image lacks it.
func ensureUser(name string) error {
	lines := nonEmptyLines(readOr("/etc/passwd"))
	used := map[int]bool{}
	for _, l := range lines {
		f := strings.Split(l, ":")
		if f[0] == name {
			return nil
		}
		if len(f) > 2 {
			if n, err := strconv.Atoi(f[2]); err == nil {
				used[n] = true
			}
		}
	}
	uid := 1000
	for used[uid] {
		uid++
	}
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	home := "/home/" + name
	id := strconv.Itoa(uid)
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return err
	}
	lines = append(lines, name+":x:"+id+":"+id+"::"+home+":"+shell)
	if err := os.WriteFile("/etc/passwd", []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	groups := nonEmptyLines(readOr("/etc/group"))
	known := false
	for _, l := range groups {
		known = known || strings.Split(l, ":")[0] == name
	}
	if !known {
		groups = append(groups, name+":x:"+id+":")
		if err := os.WriteFile("/etc/group", []byte(strings.Join(groups, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(home, 0o777); err != nil {
		return err
	}
	if err := os.Chown(home, uid, uid); err != nil {
		return err
	}
	fmt.Printf("created user %s (uid %d)\n", name, uid)
	return nil
}

// copyStep is COPY/ADD from the staged context: src relative to root (its last element may
// be a glob), into dest (a folder when src is a glob or a folder, dest ends in "/" or is a
// folder already), then owner and mode ("": keep) on everything it wrote.
func copyStep(root, src, dest, owner, mode string) error {
	uid, gid, err := account(owner)
	if err != nil {
		return err
	}
	var perm uint64
	if mode != "" {
		if perm, err = strconv.ParseUint(mode, 8, 32); err != nil {
			return fmt.Errorf("COPY: invalid mode '%s'", mode)
		}
	}
	glob := strings.ContainsAny(src, "*?[")
	var matches []string
	if glob {
		dir, base := path.Dir(src), path.Base(src)
		d, _ := os.Open(filepath.Join(root, dir))
		if d != nil {
			names, _ := d.Readdirnames(-1)
			d.Close()
			for _, n := range names {
				if ok, _ := path.Match(base, n); ok {
					matches = append(matches, filepath.Join(root, dir, n))
				}
			}
		}
	} else {
		matches = []string{filepath.Join(root, path.Clean(src))}
	}
	for _, m := range matches {
		if _, err := os.Stat(m); err != nil {
			matches = nil
			break
		}
	}
	if len(matches) == 0 {
		return fmt.Errorf("COPY: '%s' matched no files in the uploaded context", src)
	}
	st, derr := os.Stat(dest)
	intoDir := glob || len(matches) > 1 || strings.HasSuffix(dest, "/") || (derr == nil && st.IsDir())
	var copied []string
	var walk func(p string)
	walk = func(p string) {
		copied = append(copied, p)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			names, _ := readNames(p)
			for _, n := range names {
				walk(filepath.Join(p, n))
			}
		}
	}
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil {
			return err
		}
		target := dest
		if !fi.IsDir() && intoDir {
			target = filepath.Join(dest, filepath.Base(m))
		}
		parent := filepath.Dir(target)
		if fi.IsDir() {
			parent = target
		}
		if err := os.MkdirAll(parent, 0o777); err != nil {
			return err
		}
		if err := nodefs.CopyTree(m, target); err != nil {
			return err
		}
		if fi.IsDir() {
			copied = append(copied, target)
			names, _ := readNames(m)
			for _, n := range names {
				walk(filepath.Join(target, n))
			}
		} else {
			walk(target)
		}
	}
	for _, p := range copied {
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
		if fi, err := os.Lstat(p); mode != "" && err == nil && fi.Mode()&os.ModeSymlink == 0 {
			if err := os.Chmod(p, os.FileMode(perm&0o777)|nodefs.SpecialBits(uint32(perm))); err != nil {
				return err
			}
		}
	}
	fmt.Printf("copied %d entries to %s\n", len(copied), dest)
	return nil
}

func readNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
