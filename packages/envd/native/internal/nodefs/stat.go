package nodefs

import "syscall"

// Lstat is lstat(2) (retried on EINTR), its error worded as Node words it.
func Lstat(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Lstat(p, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, Wrap("lstat", p, err)
		}
		return &st, nil
	}
}

// Stat is stat(2) (retried on EINTR), its error worded as Node words it.
func Stat(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Stat(p, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, Wrap("stat", p, err)
		}
		return &st, nil
	}
}

// IsDir: mode (st_mode) is a directory's.
func IsDir(mode uint32) bool { return mode&syscall.S_IFMT == syscall.S_IFDIR }

// MtimeMs is Node's Stats.mtimeMs (a double, computed the way Node does).
func MtimeMs(st *syscall.Stat_t) float64 {
	return float64(st.Mtim.Sec)*1e3 + float64(st.Mtim.Nsec)/1e6
}
