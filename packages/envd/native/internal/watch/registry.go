package watch

// The watchers clients poll (CreateWatcher / GetWatcherEvents / RemoveWatcher): each feeds a
// bounded buffer that a poll drains; those nobody polls for a while are removed.

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	fspb "aenv/envd/internal/gen/filesystem"
)

const (
	// Events kept per watcher between polls (the oldest go first).
	maxBufferedWatchEvents = 10000
	// Watchers nobody polled for this long are removed.
	watcherIdle = 30 * time.Minute
)

type polledWatcher struct {
	watcher  *Tree
	mu       sync.Mutex
	events   []*fspb.FilesystemEvent
	lastPoll time.Time
}

// Registry holds the polled watchers by id.
type Registry struct {
	mu      sync.Mutex
	byID    map[string]*polledWatcher
	sweeper bool
}

// NewRegistry holds no watchers yet.
func NewRegistry() *Registry {
	return &Registry{byID: map[string]*polledWatcher{}}
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Create makes (and starts) the watcher that feeds the new entry, through start(push), and
// answers its id.
func (r *Registry) Create(start func(push func(*fspb.FilesystemEvent)) (*Tree, error)) (string, error) {
	id := newUUID()
	pw := &polledWatcher{lastPoll: time.Now()}
	w, err := start(func(ev *fspb.FilesystemEvent) {
		pw.mu.Lock()
		if len(pw.events) >= maxBufferedWatchEvents {
			copy(pw.events, pw.events[1:])
			pw.events = pw.events[:len(pw.events)-1]
		}
		pw.events = append(pw.events, ev)
		pw.mu.Unlock()
	})
	if err != nil {
		return "", err
	}
	pw.watcher = w
	r.mu.Lock()
	r.byID[id] = pw
	if !r.sweeper {
		r.sweeper = true
		go r.sweep()
	}
	r.mu.Unlock()
	return id, nil
}

// Drain hands out (and forgets) the events gathered since the last poll; false for an
// unknown id.
func (r *Registry) Drain(id string) ([]*fspb.FilesystemEvent, bool) {
	r.mu.Lock()
	pw, ok := r.byID[id]
	r.mu.Unlock()
	if !ok {
		return nil, false
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.lastPoll = time.Now()
	evs := pw.events
	pw.events = nil
	return evs, true
}

// Remove stops and forgets a watcher; false for an unknown id.
func (r *Registry) Remove(id string) bool {
	r.mu.Lock()
	pw, ok := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if !ok {
		return false
	}
	pw.watcher.Close()
	return true
}

func (r *Registry) sweep() {
	for range time.Tick(time.Minute) {
		var idle []*polledWatcher
		r.mu.Lock()
		for id, pw := range r.byID {
			pw.mu.Lock()
			stale := time.Since(pw.lastPoll) > watcherIdle
			pw.mu.Unlock()
			if stale {
				delete(r.byID, id)
				idle = append(idle, pw)
			}
		}
		r.mu.Unlock()
		for _, pw := range idle {
			pw.watcher.Close()
		}
	}
}
