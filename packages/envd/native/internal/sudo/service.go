// Package sudo is envd's side of `sudo`/`su` (the client is init/aenv-sudo.c): a Unix
// socket at /run/aenv/sudo.sock that any process in the sandbox may use, which runs the
// requested command as root (or the requested user) and relays its stdio and exit status.
// Reachable only from inside this sandbox: the sandbox, not the account, is the security
// boundary here (runsc sets no_new_privs, so a setuid sudo cannot work). The service and the
// `sudo`/`su` links are here, one client's connection in conn.go, one command's run in run.go
// (started through the exec helper, exec.go), the command line's options in options.go.
package sudo

import (
	"errors"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"aenv/envd/internal/users"
)

const (
	// clientPath is the static client in the runtime folder mounted at /.aenv.
	clientPath = "/.aenv/bin/aenv-sudo"
	socketPath = "/run/aenv/sudo.sock"
	// maxRequest is the largest frame (arguments + environment).
	maxRequest = 4 * 1024 * 1024
)

// InSandbox: only envd inside a sandbox (started by aenv-init, PID 1, with the runtime
// mounted) runs the sudo service and installs the links.
func InSandbox() bool {
	if os.Getppid() != 1 {
		return false
	}
	_, err := os.Stat(clientPath)
	return err == nil
}

var linksMu sync.Mutex

// InstallLinks puts `sudo` and `su` first on every PATH in the sandbox: symlinks in
// /usr/local/bin to aenv-sudo (/usr/local/bin comes before /usr/bin and /bin).
func InstallLinks() {
	linksMu.Lock()
	defer linksMu.Unlock()
	for _, name := range []string{"sudo", "su"} {
		link := "/usr/local/bin/" + name
		if t, err := os.Readlink(link); err == nil && t == clientPath {
			continue
		}
		if err := installLink(link); err != nil {
			log.Printf("warn: %s not installed: %v", name, err)
		}
	}
}

func installLink(link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o777); err != nil {
		return err
	}
	// unlink, not remove: a directory there is not ours to delete (rmSync without recursive)
	if err := syscall.Unlink(link); err != nil && err != syscall.ENOENT {
		return &os.PathError{Op: "unlink", Path: link, Err: err}
	}
	return os.Symlink(clientPath, link)
}

// Start listens on /run/aenv/sudo.sock and serves sudo/su requests in the
// background; a failure is logged, not fatal.
func Start(accounts *users.DB) {
	ln, err := listen(socketPath)
	if err != nil {
		log.Printf("warn: sudo service not started: %v", err)
		return
	}
	go serve(ln, accounts)
}

func listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := syscall.Unlink(path); err != nil && err != syscall.ENOENT {
		return nil, &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Every account in the sandbox may ask: the passwordless sudo E2B's templates give.
	if err := os.Chmod(path, 0o666); err != nil {
		log.Printf("warn: sudo service: %v", err)
	}
	return ln, nil
}

func serve(ln *net.UnixListener, users *users.DB) {
	delay := time.Duration(0)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				log.Printf("warn: sudo service stopped: %v", err)
				return
			}
			// EMFILE and the like: wait and try again rather than stop serving
			if delay == 0 {
				log.Printf("warn: sudo service: %v", err)
				delay = 10 * time.Millisecond
			} else if delay < time.Second {
				delay *= 2
			}
			time.Sleep(delay)
			continue
		}
		delay = 0
		s := &conn{c: c, users: users}
		go s.serve()
	}
}
