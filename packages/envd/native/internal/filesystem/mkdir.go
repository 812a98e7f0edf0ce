package filesystem

// Creating directories for a user as MakeDir and Move do: the missing ones are made as
// Node's recursive mkdir makes them and given to the RPC's user (when envd runs as root).
// An upload makes its parents as E2B's envd does (write.go).

import (
	"os"
	"path/filepath"
	"strings"

	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/users"
)

// chownMade gives a directory just made to u (best effort) when envd runs as root.
func chownMade(p string, u *users.User) {
	if os.Getuid() != 0 {
		return
	}
	os.Chown(p, u.UID, u.GID) // best effort (read-only or foreign filesystems)
}

// mkdirpOwned creates dir and its missing parents, the new ones owned by u; whether dir was created.
func mkdirpOwned(dir string, u *users.User) (bool, error) {
	first, err := nodefs.Mkdirp(dir)
	if err != nil || first == "" {
		return false, err
	}
	cur := first
	chownMade(cur, u)
	if rel, err := filepath.Rel(first, dir); err == nil && rel != "." {
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			cur = filepath.Join(cur, part)
			chownMade(cur, u)
		}
	}
	return true, nil
}
