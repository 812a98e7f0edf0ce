package process

// The processes envd started: live ones by pid, the status of recently finished ones.

import (
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"aenv/envd/internal/connect"
	pb "aenv/envd/internal/gen/process"
)

const (
	// exited processes whose status Connect still reports
	maxExited = 2000
	// after the exit, output that lingers (a grandchild holding the pipes) is awaited until it
	// has been quiet this long, or at most exitDrainMax
	exitFlush    = 250 * time.Millisecond
	exitDrainMax = 5 * time.Second
	// events queued for one subscriber; when full, the process's output is not read further
	subscriberQueue = 128
	readChunk       = 32 << 10
)

type endInfo struct {
	ExitCode int32
	Exited   bool
	Status   string
	Error    string
}

// procEvent is output (stream "stdout", "stderr" or "pty") or, with end set, the end.
type procEvent struct {
	stream string
	data   []byte
	end    *endInfo
}

// subscriber is one stream's view of a process.
type subscriber struct {
	ch   chan procEvent
	done chan struct{}
	once sync.Once
}

func newSubscriber() *subscriber {
	return &subscriber{ch: make(chan procEvent, subscriberQueue), done: make(chan struct{})}
}

// deliver blocks while the subscriber's queue is full (flow control), not once it has left.
func (s *subscriber) deliver(ev procEvent) {
	select {
	case s.ch <- ev:
	case <-s.done:
	}
}

type proc struct {
	mgr     *Manager
	pid     int
	seq     uint64
	tag     *string
	cmd     string
	args    []string
	envs    map[string]string
	cwd     string
	isPty   bool
	process *os.Process

	mu       sync.Mutex
	subs     map[*subscriber]struct{}
	end      *endInfo
	reaped   bool
	lifetime *time.Timer

	// stdin pipe: writes in order (wmu), closed once
	stdin       *os.File
	wmu         sync.Mutex
	smu         sync.Mutex
	stdinClosed bool
	stdinShut   bool // the file itself is closed
	// PTY master (also the output)
	master *os.File
	pmu    sync.Mutex
}

// Manager: live processes by pid, and the status of recently finished ones.
type Manager struct {
	debug  bool // log each process's end and failed signals
	mu     sync.Mutex
	live   map[int]*proc
	exited map[int]*proc
	order  []int // exited pids, oldest first
	seq    uint64
}

func newManager(debug bool) *Manager {
	return &Manager{debug: debug, live: map[int]*proc{}, exited: map[int]*proc{}}
}

func (m *Manager) removeExitedLocked(pid int) {
	if _, ok := m.exited[pid]; !ok {
		return
	}
	delete(m.exited, pid)
	for i, p := range m.order {
		if p == pid {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
}

func (m *Manager) finished(p *proc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[p.pid] == p {
		delete(m.live, p.pid)
	}
	m.removeExitedLocked(p.pid)
	m.exited[p.pid] = p
	m.order = append(m.order, p.pid)
	for len(m.order) > maxExited {
		delete(m.exited, m.order[0])
		m.order = m.order[1:]
	}
}

// start spawns spec; first (if any) is subscribed before any output can be read.
func (m *Manager) start(spec *spawnSpec, tag *string, cfgEnvs map[string]string, first *subscriber) (*proc, error) {
	var sp *spawned
	var err error
	if spec.pty != nil {
		sp, err = spawnPty(spec)
		if err != nil {
			return nil, connect.Errorf(connect.CodeInternal, "error starting PTY process: %s", spawnError(spec.cmd, err))
		}
	} else {
		sp, err = spawnPipes(spec)
		if err != nil {
			return nil, connect.Errorf(connect.CodeInternal, "error starting process '%s': %s", spec.cmd, spawnError(spec.cmd, err))
		}
	}
	p := &proc{
		mgr: m, pid: sp.process.Pid, tag: tag, cmd: spec.cmd, args: spec.args, envs: cfgEnvs,
		cwd: spec.cwd, isPty: spec.pty != nil, process: sp.process, subs: map[*subscriber]struct{}{},
		stdin: sp.stdin, master: sp.master,
	}
	if first != nil {
		p.subs[first] = struct{}{}
	}
	m.mu.Lock()
	m.seq++
	p.seq = m.seq
	m.removeExitedLocked(p.pid)
	m.live[p.pid] = p
	m.mu.Unlock()

	waitCh := make(chan *os.ProcessState, 1)
	go func() {
		st, err := p.process.Wait()
		if err != nil {
			log.Printf("process %d: wait: %v", p.pid, err)
			st = nil
		}
		p.mu.Lock()
		p.reaped = true
		p.mu.Unlock()
		waitCh <- st
	}()
	go p.pump(sp.outputs, sp.kinds, waitCh)
	return p, nil
}

func (m *Manager) list() []*proc {
	m.mu.Lock()
	out := make([]*proc, 0, len(m.live))
	for _, p := range m.live {
		out = append(out, p)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

func describeSelector(sel *pb.ProcessSelector) *connect.Error {
	if pid := selectorPid(sel); pid != nil {
		return connect.Errorf(connect.CodeNotFound, "process with pid %d not found", *pid)
	}
	if tag := selectorTag(sel); tag != nil {
		return connect.Errorf(connect.CodeNotFound, "process with tag %s not found", *tag)
	}
	return connect.Errorf(connect.CodeInvalidArgument, "process selector is required")
}

func (m *Manager) find(sel *pb.ProcessSelector, includeExited bool) *proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pidp := selectorPid(sel); pidp != nil {
		pid := int(*pidp)
		if p := m.live[pid]; p != nil {
			return p
		}
		if includeExited {
			return m.exited[pid]
		}
		return nil
	}
	if tag := selectorTag(sel); tag != nil {
		var best *proc
		for _, p := range m.live {
			if p.tag != nil && *p.tag == *tag && (best == nil || p.seq < best.seq) {
				best = p
			}
		}
		if best != nil || !includeExited {
			return best
		}
		for i := len(m.order) - 1; i >= 0; i-- {
			if p := m.exited[m.order[i]]; p != nil && p.tag != nil && *p.tag == *tag {
				return p
			}
		}
	}
	return nil
}

// getLive: a running process, or not_found.
func (m *Manager) getLive(sel *pb.ProcessSelector) (*proc, error) {
	if p := m.find(sel, false); p != nil {
		return p, nil
	}
	return nil, describeSelector(sel)
}

// getAny: a running or recently finished process, or not_found.
func (m *Manager) getAny(sel *pb.ProcessSelector) (*proc, error) {
	if p := m.find(sel, true); p != nil {
		return p, nil
	}
	return nil, describeSelector(sel)
}
