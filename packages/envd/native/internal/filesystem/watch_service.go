package filesystem

// WatchDir (a server stream of a directory's changes) and the polling watchers for clients
// that cannot hold a stream open (CreateWatcher, GetWatcherEvents, RemoveWatcher).

import (
	"sync"
	"syscall"
	"time"

	"aenv/envd/internal/connect"
	fspb "aenv/envd/internal/gen/filesystem"
	"aenv/envd/internal/users"
	"aenv/envd/internal/watch"
	"google.golang.org/protobuf/proto"
)

// watchRequest is what WatchDirRequest and CreateWatcherRequest share.
type watchRequest interface {
	GetRecursive() bool
	GetIncludeEntry() bool
}

// startWatcher checks that p (resolved) is a directory, then watches it; events go to push.
func (s *Service) startWatcher(p string, r watchRequest, push func(*fspb.FilesystemEvent)) (*watch.Tree, error) {
	if err := requireDir(p); err != nil {
		return nil, err
	}
	opts := watch.Options{Recursive: r.GetRecursive(), Debug: s.debug}
	if r.GetIncludeEntry() {
		opts.Entry = func(abs string, st *syscall.Stat_t) *fspb.EntryInfo {
			return entryFromStat(abs, st, s.users.DB.Accounts(), abs)
		}
	}
	w := watch.NewTree(p, opts, push)
	if err := w.Start(); err != nil {
		w.Close()
		return nil, rpcError(err, p)
	}
	return w, nil
}

func (s *Service) watchDir(c *connect.Call, send func(proto.Message) error) error {
	r := &fspb.WatchDirRequest{}
	p, _, err := s.decodePath(c, r)
	if err != nil {
		return err
	}
	q := newWatchQueue()
	w, err := s.startWatcher(p, r, q.push)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	// ends at the Connect-Timeout-Ms deadline or when the client goes away (no error: `{}`)
	interval := connect.KeepaliveInterval(c.Header)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	flush := func() (bool, error) {
		evs := q.take()
		for _, ev := range evs {
			if err := send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return false, err
			}
		}
		return len(evs) > 0, nil
	}
	for {
		sent, err := flush()
		if err != nil {
			return err
		}
		if sent {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(interval)
		}
		select {
		case <-c.Ctx.Done():
			_, err := flush()
			return err
		case <-q.wake:
		case <-timer.C:
			if q.len() == 0 {
				if err := send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
					return err
				}
			}
			timer.Reset(interval)
		}
	}
}

func (s *Service) createWatcher(r *fspb.CreateWatcherRequest, p string, _ *users.User) (proto.Message, error) {
	id, err := s.watchers.Create(func(push func(*fspb.FilesystemEvent)) (*watch.Tree, error) {
		return s.startWatcher(p, r, push)
	})
	if err != nil {
		return nil, err
	}
	return &fspb.CreateWatcherResponse{WatcherId: id}, nil
}

// The polled watchers' other calls name a watcher, not a path: they act as no user.

func (s *Service) getWatcherEvents(c *connect.Call) (proto.Message, error) {
	req := &fspb.GetWatcherEventsRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	evs, ok := s.watchers.Drain(req.GetWatcherId())
	if !ok {
		return nil, watcherNotFound(req.GetWatcherId())
	}
	return &fspb.GetWatcherEventsResponse{Events: evs}, nil
}

func (s *Service) removeWatcher(c *connect.Call) (proto.Message, error) {
	req := &fspb.RemoveWatcherRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	if !s.watchers.Remove(req.GetWatcherId()) {
		return nil, watcherNotFound(req.GetWatcherId())
	}
	return &fspb.RemoveWatcherResponse{}, nil
}

func watcherNotFound(id string) error {
	return connect.Errorf(connect.CodeNotFound, "watcher with id %s not found", id)
}

type watchQueue struct {
	mu    sync.Mutex
	items []*fspb.FilesystemEvent
	wake  chan struct{}
}

func newWatchQueue() *watchQueue { return &watchQueue{wake: make(chan struct{}, 1)} }

func (q *watchQueue) push(ev *fspb.FilesystemEvent) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *watchQueue) take() []*fspb.FilesystemEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

func (q *watchQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}
