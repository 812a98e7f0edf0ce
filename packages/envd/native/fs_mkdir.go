package main

// Creating directories for a user: the missing ones are made and given to the RPC's user
// (when envd runs as root), as MakeDir, Move and file uploads need.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"aenv/envd/internal/users"
)

func fsChownIfRoot(p string, u *users.User) {
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
func mkdirpOwnedFs(dir string, u *users.User) (bool, error) {
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
