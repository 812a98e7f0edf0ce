package main

// process.Process (packages/protocol/proto/process): Start and Connect stream a process's
// events; List, SendInput, StreamInput, SendSignal, Update and CloseStdin act on a running one.

import (
	"context"
	"log"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	pb "aenv/envd/gen/process"
)

const (
	// exited processes whose status Connect still reports
	maxExited = 2000
	// after the exit, output that lingers (a grandchild holding the pipes) is awaited until it
	// has been quiet this long, or at most exitDrainMax
	exitFlush    = 250 * time.Millisecond
	exitDrainMax = 5 * time.Second
	// extra time a deadline-ended stream waits for the end of the process its deadline killed
	deadlineGrace = time.Second
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
	mgr     *ProcessManager
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

// ProcessManager: live processes by pid, and the status of recently finished ones.
type ProcessManager struct {
	mu     sync.Mutex
	live   map[int]*proc
	exited map[int]*proc
	order  []int // exited pids, oldest first
	seq    uint64
}

func newProcessManager() *ProcessManager {
	return &ProcessManager{live: map[int]*proc{}, exited: map[int]*proc{}}
}

func (m *ProcessManager) removeExitedLocked(pid int) {
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

func (m *ProcessManager) finished(p *proc) {
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
func (m *ProcessManager) start(spec *spawnSpec, tag *string, cfgEnvs map[string]string, first *subscriber) (*proc, error) {
	var sp *spawned
	var err error
	if spec.pty != nil {
		sp, err = spawnPty(spec)
		if err != nil {
			return nil, rpcErr(CodeInternal, "error starting PTY process: %s", spawnError(spec.cmd, err))
		}
	} else {
		sp, err = spawnPipes(spec)
		if err != nil {
			return nil, rpcErr(CodeInternal, "error starting process '%s': %s", spec.cmd, spawnError(spec.cmd, err))
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

func (m *ProcessManager) list() []*proc {
	m.mu.Lock()
	out := make([]*proc, 0, len(m.live))
	for _, p := range m.live {
		out = append(out, p)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

func describeSelector(sel *pb.ProcessSelector) *RPCError {
	if pid := selectorPid(sel); pid != nil {
		return rpcErr(CodeNotFound, "process with pid %d not found", *pid)
	}
	if tag := selectorTag(sel); tag != nil {
		return rpcErr(CodeNotFound, "process with tag %s not found", *tag)
	}
	return rpcErr(CodeInvalidArgument, "process selector is required")
}

func (m *ProcessManager) find(sel *pb.ProcessSelector, includeExited bool) *proc {
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
func (m *ProcessManager) getLive(sel *pb.ProcessSelector) (*proc, error) {
	if p := m.find(sel, false); p != nil {
		return p, nil
	}
	return nil, describeSelector(sel)
}

// getAny: a running or recently finished process, or not_found.
func (m *ProcessManager) getAny(sel *pb.ProcessSelector) (*proc, error) {
	if p := m.find(sel, true); p != nil {
		return p, nil
	}
	return nil, describeSelector(sel)
}

// killAll sends SIGKILL to every running process (shutdown).
func (m *ProcessManager) killAll() {
	for _, p := range m.list() {
		p.signal(syscall.SIGKILL)
	}
}

// --- one process ---

// pump reads the process's output and hands it to its subscribers (blocking while one of
// them is full: flow control), then, once the process was reaped and its output ended (or
// went quiet: a grandchild may hold the pipes), sends the end.
func (p *proc) pump(outputs []*os.File, kinds []string, waitCh <-chan *os.ProcessState) {
	chunks := make(chan procEvent)
	var wg sync.WaitGroup
	for i, f := range outputs {
		wg.Add(1)
		go func(f *os.File, kind string) {
			defer wg.Done()
			buf := make([]byte, readChunk)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					chunks <- procEvent{stream: kind, data: append([]byte(nil), buf[:n]...)}
				}
				if err != nil {
					return
				}
			}
		}(f, kinds[i])
	}
	eof := make(chan struct{})
	go func() {
		wg.Wait()
		close(eof)
	}()

	var (
		state    *os.ProcessState
		reaped   bool
		exitedAt time.Time
		lastData time.Time
		outEnded bool
		recheck  <-chan time.Time
	)
	for !(reaped && outEnded) {
		select {
		case ev := <-chunks:
			lastData = time.Now()
			p.deliver(ev)
		case <-eof:
			outEnded, eof = true, nil
		case st := <-waitCh:
			state, reaped, waitCh = st, true, nil
			exitedAt = time.Now()
			recheck = time.After(exitFlush)
		case <-recheck:
			recheck = nil
		}
		if !reaped || outEnded {
			continue
		}
		now := time.Now()
		quiet := now.Sub(exitedAt) >= exitFlush && now.Sub(lastData) >= exitFlush
		if quiet {
			for _, f := range outputs {
				if pendingBytes(f) > 0 {
					quiet = false // unread output: read it first
				}
			}
		}
		if quiet || now.Sub(exitedAt) >= exitDrainMax {
			// Stop reading; what a reader holds already still goes out before the end.
			closeFiles(outputs...)
			for eof != nil {
				select {
				case ev := <-chunks:
					p.deliver(ev)
				case <-eof:
					eof = nil
				}
			}
			outEnded = true
		} else if recheck == nil {
			recheck = time.After(100 * time.Millisecond)
		}
	}
	closeFiles(outputs...)
	p.finish(endFromState(state))
}

func endFromState(st *os.ProcessState) endInfo {
	if st == nil {
		return endInfo{ExitCode: -1, Exited: true, Status: "exit status -1", Error: "exit status -1"}
	}
	e := endInfo{ExitCode: int32(st.ExitCode()), Exited: st.Exited(), Status: st.String()}
	if !st.Success() {
		e.Error = e.Status
	}
	return e
}

func (p *proc) deliver(ev procEvent) {
	p.mu.Lock()
	if len(p.subs) == 0 {
		p.mu.Unlock()
		return // nobody listens: dropped
	}
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		s.deliver(ev)
	}
}

func (p *proc) finish(end endInfo) {
	p.mu.Lock()
	p.end = &end
	subs := p.subs
	p.subs = nil
	if p.lifetime != nil {
		p.lifetime.Stop()
	}
	p.mu.Unlock()
	p.smu.Lock()
	if p.stdin != nil && !p.stdinShut {
		p.stdinClosed, p.stdinShut = true, true
		p.stdin.Close()
	}
	p.smu.Unlock()
	p.mgr.finished(p)
	ev := procEvent{end: &end}
	for s := range subs {
		s.deliver(ev)
	}
	if debugLog {
		log.Printf("process %d ended: %s", p.pid, end.Status)
	}
}

// subscribe adds s unless the process ended; then it returns the end.
func (p *proc) subscribe(s *subscriber) *endInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		e := *p.end
		return &e
	}
	p.subs[s] = struct{}{}
	return nil
}

func (p *proc) unsubscribe(s *subscriber) {
	s.once.Do(func() { close(s.done) })
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// setLifetime: SIGKILL after d (Connect-Timeout-Ms on Start).
func (p *proc) setLifetime(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return
	}
	if p.lifetime != nil {
		p.lifetime.Stop()
	}
	p.lifetime = time.AfterFunc(d, func() {
		log.Printf("process %d: lifetime reached, killing", p.pid)
		p.signal(syscall.SIGKILL)
	})
}

// signal the whole process group, else the process itself (while not reaped: its pid may be
// someone else's afterwards).
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	ended, reaped := p.end != nil, p.reaped
	p.mu.Unlock()
	if ended {
		return
	}
	if err := syscall.Kill(-p.pid, sig); err == nil || reaped {
		return
	}
	if err := syscall.Kill(p.pid, sig); err != nil && debugLog {
		log.Printf("process %d: kill: %v", p.pid, err)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// writeWithContext writes all of data, giving up when ctx ends (a child that does not read).
func writeWithContext(ctx context.Context, f *os.File, data []byte) error {
	stop := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-ctx.Done():
			f.SetWriteDeadline(aLongTimeAgo)
		case <-stop:
		}
	}()
	_, err := f.Write(data)
	close(stop)
	<-exited
	f.SetWriteDeadline(time.Time{})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (p *proc) writePty(ctx context.Context, data []byte) error {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if err := writeWithContext(ctx, p.master, data); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rpcErr(CodeInternal, "error writing to the PTY: %v", err)
	}
	return nil
}

func (p *proc) writeStdin(ctx context.Context, data []byte) error {
	if p.isPty {
		return p.writePty(ctx, data)
	}
	if p.stdin == nil {
		return rpcErr(CodeInternal, "stdin is not enabled for this process")
	}
	p.smu.Lock()
	closed := p.stdinClosed
	p.smu.Unlock()
	if closed {
		return rpcErr(CodeInternal, "stdin is closed")
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.smu.Lock()
	shut := p.stdinShut
	p.smu.Unlock()
	if shut {
		return rpcErr(CodeInternal, "stdin is closed")
	}
	if err := writeWithContext(ctx, p.stdin, data); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rpcErr(CodeInternal, "error writing to stdin: %v", err)
	}
	return nil
}

// closeStdin: EOF once the writes before it are done.
func (p *proc) closeStdin() error {
	if p.isPty {
		return rpcErr(CodeFailedPrecondition, "cannot close stdin of a PTY process, send Ctrl+D (0x04) instead")
	}
	if p.stdin == nil {
		return rpcErr(CodeInternal, "stdin is not enabled for this process")
	}
	p.smu.Lock()
	already := p.stdinClosed
	p.stdinClosed = true
	p.smu.Unlock()
	if already {
		return nil
	}
	shut := func() {
		p.smu.Lock()
		if !p.stdinShut {
			p.stdinShut = true
			p.stdin.Close()
		}
		p.smu.Unlock()
	}
	if p.wmu.TryLock() {
		shut()
		p.wmu.Unlock()
	} else {
		go func() { // after the write in progress
			p.wmu.Lock()
			shut()
			p.wmu.Unlock()
		}()
	}
	return nil
}

func (p *proc) resize(cols, rows uint32) error {
	if !p.isPty {
		return rpcErr(CodeInternal, "tty not assigned to process")
	}
	p.mu.Lock()
	ended := p.end != nil
	p.mu.Unlock()
	if ended {
		return nil
	}
	clamp := func(v uint32) uint16 {
		if v < 1 {
			return 1
		}
		if v > 0xffff {
			return 0xffff
		}
		return uint16(v)
	}
	if err := setWinsize(p.master, clamp(cols), clamp(rows)); err != nil {
		return rpcErr(CodeInternal, "error resizing the PTY: %v", err)
	}
	return nil
}
