package main

// Polling watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher).

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"aenv/envd/internal/connect"
	fspb "aenv/envd/internal/gen/filesystem"
)

const (
	// Events kept per watcher between polls (the oldest go first).
	maxBufferedWatchEvents = 10000
	// Watchers nobody polled for this long are removed.
	watcherIdle = 30 * time.Minute
)

type polledWatcher struct {
	watcher  *dirWatcher
	mu       sync.Mutex
	events   []*fspb.FilesystemEvent
	lastPoll time.Time
}

type WatcherRegistry struct {
	mu      sync.Mutex
	byID    map[string]*polledWatcher
	sweeper bool
}

func newWatcherRegistry() *WatcherRegistry {
	return &WatcherRegistry{byID: map[string]*polledWatcher{}}
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// create makes (and starts) the watcher that feeds the new entry, through start(push).
func (r *WatcherRegistry) create(start func(push func(*fspb.FilesystemEvent)) (*dirWatcher, error)) (string, error) {
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

func (r *WatcherRegistry) get(id string) (*polledWatcher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pw, ok := r.byID[id]
	if !ok {
		return nil, connect.Errorf(connect.CodeNotFound, "watcher with id %s not found", id)
	}
	return pw, nil
}

// drain hands out (and forgets) the events gathered since the last poll.
func (r *WatcherRegistry) drain(id string) ([]*fspb.FilesystemEvent, error) {
	pw, err := r.get(id)
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.lastPoll = time.Now()
	evs := pw.events
	pw.events = nil
	return evs, nil
}

func (r *WatcherRegistry) remove(id string) error {
	r.mu.Lock()
	pw, ok := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if !ok {
		return connect.Errorf(connect.CodeNotFound, "watcher with id %s not found", id)
	}
	pw.watcher.Close()
	return nil
}

// CloseAll stops every polling watcher.
func (r *WatcherRegistry) CloseAll() {
	r.mu.Lock()
	all := r.byID
	r.byID = map[string]*polledWatcher{}
	r.mu.Unlock()
	for _, pw := range all {
		pw.watcher.Close()
	}
}

func (r *WatcherRegistry) sweep() {
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
