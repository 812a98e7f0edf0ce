package watch

// One watched tree (a WatchDir stream or a polling watcher): its directories' watches on the
// shared inotify instance, and raw events turned into CREATE, WRITE, REMOVE, RENAME and CHMOD.

import (
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	fspb "aenv/envd/internal/gen/filesystem"
	"aenv/envd/internal/nodefs"
)

type watchRaw struct {
	wd     int32
	dir    string
	name   string // "" for an event about dir itself
	mask   uint32
	cookie uint32
}

// isChange: only modified or attributes (fs.watch's "change"); everything else is a "rename".
func (r *watchRaw) isChange() bool {
	return r.mask&(syscall.IN_CREATE|syscall.IN_DELETE|syscall.IN_MOVED_FROM|syscall.IN_MOVED_TO) == 0
}

type watchKnown struct {
	ino     uint64
	mode    uint32
	mtimeMs float64
	size    int64
	isDir   bool
}

func knownOf(st *syscall.Stat_t) watchKnown {
	return watchKnown{ino: st.Ino, mode: st.Mode, mtimeMs: nodefs.MtimeMs(st), size: st.Size, isDir: nodefs.IsDir(st.Mode)}
}

// Options are how a tree is watched.
type Options struct {
	Recursive bool
	// Entry builds an event's entry from the path's lstat; nil: events carry none.
	Entry func(abs string, st *syscall.Stat_t) *fspb.EntryInfo
	// Debug logs the directories that cannot be watched.
	Debug bool
}

// Tree is one watched tree (a WatchDir stream's or a polled watcher's).
type Tree struct {
	root    string
	opts    Options
	onEvent func(*fspb.FilesystemEvent)
	hub     *inotifyHub

	mu     sync.Mutex
	closed bool
	raw    []watchRaw
	dirs   map[string]int32 // watched directory → its inotify watch
	wake   chan struct{}
	stop   chan struct{}

	// the processing goroutine's (and start's, before it runs)
	cache map[string]watchKnown
}

// NewTree watches root (once started) and hands its events to onEvent, in order.
func NewTree(root string, opts Options, onEvent func(*fspb.FilesystemEvent)) *Tree {
	return &Tree{
		root: root, opts: opts, onEvent: onEvent,
		dirs: map[string]int32{}, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		cache: map[string]watchKnown{},
	}
}

// watchErr words a failure to watch p as Node's fs.watch does.
func watchErr(p string, err error) error {
	n := nodefs.Errno(err)
	if n == 0 {
		return err
	}
	e := &nodefs.Error{Errno: n, Call: "watch", Path: p}
	if n == syscall.ENOSPC {
		e.Text = "System limit for number of file watchers reached"
	}
	return e
}

// Start watches the root (and, when recursive, the tree below it) and remembers its contents.
func (w *Tree) Start() error {
	h, err := getInotifyHub()
	if err != nil {
		return watchErr(w.root, err)
	}
	w.hub = h
	if err := w.addDir(w.root, true, false); err != nil {
		return err
	}
	go w.process()
	return nil
}

func (w *Tree) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// Close stops the watcher; no event is delivered after it returns.
func (w *Tree) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	dirs := w.dirs
	w.dirs = map[string]int32{}
	w.raw = nil
	close(w.stop)
	w.mu.Unlock()
	if w.hub != nil {
		for d, wd := range dirs {
			w.hub.remove(w, d, wd)
		}
	}
}

func (w *Tree) enqueue(batch []watchRaw) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.raw = append(w.raw, batch...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Tree) pop() (watchRaw, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.raw) == 0 {
		return watchRaw{}, false
	}
	r := w.raw[0]
	w.raw[0] = watchRaw{}
	w.raw = w.raw[1:]
	if len(w.raw) == 0 {
		w.raw = nil
	}
	return r, true
}

// addDir watches dir (and, when recursive, its subdirectories) and remembers what it holds.
// With announce (a directory that appeared while watching), entries already inside it are
// reported as created: they were made before its watch could see them.
func (w *Tree) addDir(dir string, isRoot, announce bool) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	if _, ok := w.dirs[dir]; ok {
		w.mu.Unlock()
		return nil
	}
	if len(w.dirs) >= maxWatchedDirs {
		w.mu.Unlock()
		log.Printf("watch limit reached (%d directories): %s is not watched", maxWatchedDirs, dir)
		return nil
	}
	wd, err := w.hub.add(w, dir)
	if err != nil {
		w.mu.Unlock()
		if isRoot {
			return watchErr(dir, err)
		}
		if w.opts.Debug {
			log.Printf("cannot watch directory %s: %v", dir, err)
		}
		return nil
	}
	w.dirs[dir] = wd
	w.mu.Unlock()

	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil && len(names) == 0 {
		return nil
	}
	for _, n := range names {
		full := filepath.Join(dir, n)
		st, err := nodefs.Lstat(full)
		if err != nil || w.isClosed() {
			continue
		}
		_, seen := w.cache[full]
		w.cache[full] = knownOf(st)
		if announce && !seen {
			w.emit(full, fspb.EventType_EVENT_TYPE_CREATE, st)
		}
		if w.opts.Recursive && nodefs.IsDir(st.Mode) {
			w.addDir(full, false, announce)
		}
	}
	return nil
}

// dropDir stops watching dir and everything below it (only if dir's watch is still wd, when wd ≥ 0).
func (w *Tree) dropDir(dir string, wd int32) {
	prefix := dir + "/"
	w.mu.Lock()
	if cur, ok := w.dirs[dir]; wd >= 0 && (!ok || cur != wd) {
		w.mu.Unlock()
		return
	}
	var gone []inotifySub
	var wds []int32
	for d, id := range w.dirs {
		if d == dir || strings.HasPrefix(d, prefix) {
			delete(w.dirs, d)
			gone = append(gone, inotifySub{w, d})
			wds = append(wds, id)
		}
	}
	w.mu.Unlock()
	for i, s := range gone {
		w.hub.remove(w, s.dir, wds[i])
	}
	for k := range w.cache {
		if strings.HasPrefix(k, prefix) {
			delete(w.cache, k)
		}
	}
}

func (w *Tree) process() {
	for {
		select {
		case <-w.stop:
			return
		case <-w.wake:
		}
		for {
			r, ok := w.pop()
			if !ok {
				break
			}
			w.handle(&r)
		}
	}
}

func (w *Tree) handle(ev *watchRaw) {
	if ev.name == "" {
		// about a watched directory itself: deleted or moved away → handled via its parent
		if ev.mask&syscall.IN_IGNORED != 0 {
			w.dropDir(ev.dir, ev.wd)
		} else if ev.mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF) != 0 {
			if _, err := nodefs.Lstat(ev.dir); err != nil {
				w.dropDir(ev.dir, ev.wd)
			}
		}
		return
	}
	full := filepath.Join(ev.dir, ev.name)
	st, _ := nodefs.Lstat(full)
	prev, hadPrev := w.cache[full]
	if ev.isChange() {
		// (reported even when the file is already gone, as E2B's envd, which stats nothing)
		if st != nil {
			w.cache[full] = knownOf(st)
		}
		// as fsnotify reads inotify for E2B's envd: attributes (mode, owner, times, xattrs) →
		// CHMOD, contents → WRITE
		if ev.mask&syscall.IN_ATTRIB != 0 {
			w.emit(full, fspb.EventType_EVENT_TYPE_CHMOD, st)
		}
		if ev.mask&syscall.IN_MODIFY != 0 {
			w.emit(full, fspb.EventType_EVENT_TYPE_WRITE, st)
		}
		return
	}
	if st != nil {
		w.cache[full] = knownOf(st)
		if hadPrev && prev.isDir && (prev.ino != st.Ino || !nodefs.IsDir(st.Mode)) {
			w.dropDir(full, -1)
		}
		w.emit(full, fspb.EventType_EVENT_TYPE_CREATE, st)
		if w.opts.Recursive && nodefs.IsDir(st.Mode) {
			w.addDir(full, false, true)
		}
		return
	}
	// gone: renamed away (its inode reappears among the queued events) or removed
	delete(w.cache, full)
	if hadPrev && prev.isDir {
		w.dropDir(full, -1)
	}
	if hadPrev && w.reappears(prev.ino, full, ev) {
		w.emit(full, fspb.EventType_EVENT_TYPE_RENAME, nil)
	} else {
		w.emit(full, fspb.EventType_EVENT_TYPE_REMOVE, nil)
	}
}

// reappears: a queued create/move event names another path with inode ino (or is the
// MOVED_TO half of ev's rename).
func (w *Tree) reappears(ino uint64, gone string, ev *watchRaw) bool {
	w.mu.Lock()
	queued := make([]watchRaw, len(w.raw))
	copy(queued, w.raw)
	w.mu.Unlock()
	for i := range queued {
		r := &queued[i]
		if r.name == "" || r.isChange() {
			continue
		}
		if ev.mask&syscall.IN_MOVED_FROM != 0 && ev.cookie != 0 && r.mask&syscall.IN_MOVED_TO != 0 && r.cookie == ev.cookie {
			return true
		}
		candidate := filepath.Join(r.dir, r.name)
		if candidate == gone {
			continue
		}
		if st, err := nodefs.Lstat(candidate); err == nil && st.Ino == ino {
			return true
		}
	}
	return false
}

func (w *Tree) emit(full string, typ fspb.EventType, st *syscall.Stat_t) {
	name, err := filepath.Rel(w.root, full)
	if err != nil || name == "." || name == ".." || strings.HasPrefix(name, "../") {
		return
	}
	if !w.opts.Recursive && strings.Contains(name, "/") {
		return
	}
	var entry *fspb.EntryInfo
	if w.opts.Entry != nil && st != nil && typ != fspb.EventType_EVENT_TYPE_REMOVE && typ != fspb.EventType_EVENT_TYPE_RENAME {
		entry = w.opts.Entry(full, st)
	}
	if w.isClosed() {
		return
	}
	w.onEvent(&fspb.FilesystemEvent{Name: name, Type: typ, Entry: entry})
}
