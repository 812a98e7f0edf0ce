package main

// Creating directories for a user: the missing ones are made and given to the RPC's user
// (when envd runs as root), as MakeDir, Move and file uploads need.

import (
	"os"
	"path/filepath"
	"strings"

	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/users"
)

func fsChownIfRoot(p string, u *users.User) {
	if os.Getuid() != 0 {
		return
	}
	os.Chown(p, u.UID, u.GID) // best effort (read-only or foreign filesystems)
}

// mkdirpOwnedFs creates dir and its missing parents, the new ones owned by u; whether dir was created.
func mkdirpOwnedFs(dir string, u *users.User) (bool, error) {
	first, err := nodefs.Mkdirp(dir)
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
