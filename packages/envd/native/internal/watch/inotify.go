// Package watch watches directory trees with inotify and reports their changes as
// filesystem.FilesystemEvent messages: one inotify instance for the whole daemon (here; as
// libuv keeps one per process, so that the per-user limit of 128 instances is never a
// concern), one watch per directory, recursion, renames and names relative to the watched
// root under our control (tree.go), and the watchers clients poll (registry.go).
//
// Events are classified as E2B's envd reports them, with lstat and a cache of what was seen:
// created/deleted/moved + exists → CREATE; gone → RENAME when the same inode shows up among
// the events queued with it (or its MOVED_TO), else REMOVE; attributes → CHMOD; modified →
// WRITE. An upload writes in place, so it reads as E2B's: CREATE, CHMOD, WRITE.
package watch

import (
	"log"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"aenv/envd/internal/nodefs"
)

const watchMask = syscall.IN_ATTRIB | syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_DELETE |
	syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO

// Directories one watcher watches at most.
const maxWatchedDirs = 8192

// ---- the shared inotify instance ----

type inotifySub struct {
	w   *Tree
	dir string
}

type inotifyHub struct {
	mu   sync.Mutex
	fd   int
	file *os.File
	subs map[int32][]inotifySub
}

var (
	hubMu     sync.Mutex
	sharedHub *inotifyHub
)

func getInotifyHub() (*inotifyHub, error) {
	hubMu.Lock()
	defer hubMu.Unlock()
	if sharedHub != nil {
		return sharedHub, nil
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	// non-blocking: the runtime's poller waits for it, no thread is held
	h := &inotifyHub{fd: fd, file: os.NewFile(uintptr(fd), "inotify"), subs: map[int32][]inotifySub{}}
	sharedHub = h
	go h.read()
	return h, nil
}

// add watches dir for w.
func (h *inotifyHub) add(w *Tree, dir string) (int32, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wd, err := syscall.InotifyAddWatch(h.fd, dir, watchMask)
	if err != nil {
		return 0, err
	}
	id := int32(wd)
	for _, s := range h.subs[id] {
		if s.w == w && s.dir == dir {
			return id, nil
		}
	}
	h.subs[id] = append(h.subs[id], inotifySub{w, dir})
	return id, nil
}

// remove stops w's watch of dir; the inotify watch goes when nobody needs it.
func (h *inotifyHub) remove(w *Tree, dir string, wd int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs, ok := h.subs[wd]
	if !ok {
		return
	}
	kept := subs[:0]
	for _, s := range subs {
		if s.w != w || s.dir != dir {
			kept = append(kept, s)
		}
	}
	if len(kept) > 0 {
		h.subs[wd] = kept
		return
	}
	delete(h.subs, wd)
	syscall.InotifyRmWatch(h.fd, uint32(wd))
}

// read hands each batch of events (one read) to the watchers concerned, in order.
func (h *inotifyHub) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := h.file.Read(buf)
		if err != nil {
			if nodefs.Errno(err) == syscall.EINTR {
				continue
			}
			log.Printf("inotify: read failed, watching stops: %v", err)
			hubMu.Lock()
			if sharedHub == h {
				sharedHub = nil
			}
			hubMu.Unlock()
			return
		}
		var order []*Tree
		batches := map[*Tree][]watchRaw{}
		h.mu.Lock()
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameStart := off + syscall.SizeofInotifyEvent
			nameEnd := nameStart + int(ev.Len)
			if nameEnd > n {
				break
			}
			name := strings.TrimRight(string(buf[nameStart:nameEnd]), "\x00")
			off = nameEnd
			if ev.Mask&syscall.IN_Q_OVERFLOW != 0 {
				log.Printf("inotify: event queue overflow, events were lost")
				continue
			}
			subs := h.subs[ev.Wd]
			if ev.Mask&syscall.IN_IGNORED != 0 {
				delete(h.subs, ev.Wd) // the kernel dropped the watch
			}
			for _, s := range subs {
				if _, ok := batches[s.w]; !ok {
					order = append(order, s.w)
				}
				batches[s.w] = append(batches[s.w], watchRaw{wd: ev.Wd, dir: s.dir, name: name, mask: ev.Mask, cookie: ev.Cookie})
			}
		}
		h.mu.Unlock()
		for _, w := range order {
			w.enqueue(batches[w])
		}
	}
}
