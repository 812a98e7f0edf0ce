package nodefs

import (
	"path/filepath"
	"syscall"
)

// Mkdirp is Node's fs.mkdir(dir, {recursive: true, mode: 0o755}): the first directory it
// created ("" when dir existed already). A path that exists and is no directory: EEXIST for
// dir itself, ENOTDIR for a parent.
func Mkdirp(dir string) (string, error) {
	first, err := mkdirpAt(dir, true)
	if err != nil {
		if n := Errno(err); n != 0 {
			return "", &Error{Errno: n, Call: "mkdir", Path: dir}
		}
	}
	return first, err
}

func mkdirpAt(dir string, target bool) (string, error) {
	err := syscall.Mkdir(dir, 0o755)
	if err == syscall.ENOENT {
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", err
		}
		first, perr := mkdirpAt(parent, false)
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
		st, serr := Stat(dir)
		if serr != nil {
			return "", serr
		}
		if !IsDir(st.Mode) {
			if target {
				return "", syscall.EEXIST
			}
			return "", syscall.ENOTDIR
		}
		return "", nil
	}
	return "", err
}
