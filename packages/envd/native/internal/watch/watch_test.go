package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	fspb "aenv/envd/internal/gen/filesystem"
)

// events watches root and answers a function that waits until the events seen so far hold
// want ("TYPE name" each, e.g. "CREATE a") in order, with others between them allowed.
func events(t *testing.T, root string, opts Options) (*Tree, func(want ...string) []*fspb.FilesystemEvent) {
	t.Helper()
	ch := make(chan *fspb.FilesystemEvent, 1000)
	w := NewTree(root, opts, func(ev *fspb.FilesystemEvent) { ch <- ev })
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	var seen []*fspb.FilesystemEvent
	return w, func(want ...string) []*fspb.FilesystemEvent {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			i := 0
			for _, ev := range seen {
				if i < len(want) && describe(ev) == want[i] {
					i++
				}
			}
			if i == len(want) {
				got := seen
				seen = nil
				return got
			}
			select {
			case ev := <-ch:
				seen = append(seen, ev)
			case <-deadline:
				var got []string
				for _, ev := range seen {
					got = append(got, describe(ev))
				}
				t.Fatalf("want %q in order, saw %q", want, got)
			}
		}
	}
}

func describe(ev *fspb.FilesystemEvent) string {
	return strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_") + " " + ev.GetName()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestTreeEvents(t *testing.T) {
	root := t.TempDir()
	_, wait := events(t, root, Options{})
	f := filepath.Join(root, "a")
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	wait("CREATE a", "WRITE a")
	must(t, os.Chmod(f, 0o600))
	wait("CHMOD a")
	must(t, os.Rename(f, filepath.Join(root, "b")))
	wait("RENAME a", "CREATE b")
	must(t, os.Remove(filepath.Join(root, "b")))
	wait("REMOVE b")
	// Not recursive: what happens inside a new folder is not reported.
	must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub", "inner"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "last"), nil, 0o644))
	for _, ev := range wait("CREATE sub", "CREATE last") {
		if strings.Contains(ev.GetName(), "/") {
			t.Fatalf("an event below the root: %s", describe(ev))
		}
	}
}

func TestTreeRecursiveWithEntries(t *testing.T) {
	root := t.TempDir()
	entry := func(abs string, st *syscall.Stat_t) *fspb.EntryInfo {
		return &fspb.EntryInfo{Path: abs, Size: st.Size}
	}
	_, wait := events(t, root, Options{Recursive: true, Entry: entry})
	must(t, os.MkdirAll(filepath.Join(root, "d", "e"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "d", "e", "f"), []byte("four"), 0o644))
	for _, ev := range wait("CREATE d", "CREATE d/e/f") {
		if ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE && ev.GetEntry().GetPath() != filepath.Join(root, ev.GetName()) {
			t.Fatalf("%s: entry %v", describe(ev), ev.GetEntry())
		}
	}
	must(t, os.RemoveAll(filepath.Join(root, "d")))
	for _, ev := range wait("REMOVE d") {
		if ev.GetType() == fspb.EventType_EVENT_TYPE_REMOVE && ev.GetEntry() != nil {
			t.Fatalf("a removal carries no entry: %v", ev)
		}
	}
}

func TestNothingAfterClose(t *testing.T) {
	root := t.TempDir()
	var n int32
	w := NewTree(root, Options{}, func(*fspb.FilesystemEvent) { atomic.AddInt32(&n, 1) })
	must(t, w.Start())
	must(t, os.WriteFile(filepath.Join(root, "before"), nil, 0o644))
	for deadline := time.Now().Add(5 * time.Second); atomic.LoadInt32(&n) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no event")
		}
	}
	w.Close()
	seen := atomic.LoadInt32(&n)
	must(t, os.WriteFile(filepath.Join(root, "after"), nil, 0o644))
	time.Sleep(200 * time.Millisecond)
	if atomic.LoadInt32(&n) != seen {
		t.Fatal("an event after Close")
	}
}

func TestStartFailures(t *testing.T) {
	w := NewTree(filepath.Join(t.TempDir(), "gone"), Options{}, func(*fspb.FilesystemEvent) {})
	err := w.Start()
	if err == nil || !strings.HasPrefix(err.Error(), "ENOENT: no such file or directory, watch '") {
		t.Fatalf("%v", err)
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	var push func(*fspb.FilesystemEvent)
	id, err := r.Create(func(p func(*fspb.FilesystemEvent)) (*Tree, error) {
		push = p
		return NewTree(t.TempDir(), Options{}, p), nil
	})
	must(t, err)
	for i := 0; i < maxBufferedWatchEvents+5; i++ {
		push(&fspb.FilesystemEvent{Name: fmt.Sprint(i)})
	}
	evs, ok := r.Drain(id)
	if !ok || len(evs) != maxBufferedWatchEvents || evs[0].GetName() != "5" {
		t.Fatalf("the oldest go first: %v %d %s", ok, len(evs), evs[0].GetName())
	}
	if evs, ok = r.Drain(id); !ok || len(evs) != 0 {
		t.Fatalf("drained: %v %d", ok, len(evs))
	}
	if _, ok := r.Drain("nope"); ok {
		t.Fatal("an unknown id")
	}
	if !r.Remove(id) || r.Remove(id) {
		t.Fatal("removed once")
	}
	if _, err := r.Create(func(func(*fspb.FilesystemEvent)) (*Tree, error) { return nil, os.ErrNotExist }); err != os.ErrNotExist {
		t.Fatalf("a start that fails: %v", err)
	}
}
