package main

// process.Process (§5.6 of the protocol notes): Start and Connect stream a process's events,
// List, SendInput, SendSignal, Update and CloseStdin act on a running one. Behaviour follows
// the Node envd (src/process/*.ts): see there for the reasons.

import (
	"context"
	"log"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"
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
	envs    envMap
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
func (m *ProcessManager) start(spec *spawnSpec, tag *string, cfgEnvs envMap, first *subscriber) (*proc, error) {
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

func describeSelector(sel *selectorJSON) *RPCError {
	switch {
	case sel != nil && sel.Pid != nil:
		return rpcErr(CodeNotFound, "process with pid %d not found", uint32(*sel.Pid))
	case sel != nil && sel.Tag != nil:
		return rpcErr(CodeNotFound, "process with tag %s not found", *sel.Tag)
	}
	return rpcErr(CodeInvalidArgument, "process selector is required")
}

func (m *ProcessManager) find(sel *selectorJSON, includeExited bool) *proc {
	if sel == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if sel.Pid != nil {
		pid := int(*sel.Pid)
		if p := m.live[pid]; p != nil {
			return p
		}
		if includeExited {
			return m.exited[pid]
		}
		return nil
	}
	if sel.Tag != nil {
		var best *proc
		for _, p := range m.live {
			if p.tag != nil && *p.tag == *sel.Tag && (best == nil || p.seq < best.seq) {
				best = p
			}
		}
		if best != nil || !includeExited {
			return best
		}
		for i := len(m.order) - 1; i >= 0; i-- {
			if p := m.exited[m.order[i]]; p != nil && p.tag != nil && *p.tag == *sel.Tag {
				return p
			}
		}
	}
	return nil
}

// getLive: a running process, or not_found.
func (m *ProcessManager) getLive(sel *selectorJSON) (*proc, error) {
	if p := m.find(sel, false); p != nil {
		return p, nil
	}
	return nil, describeSelector(sel)
}

// getAny: a running or recently finished process, or not_found.
func (m *ProcessManager) getAny(sel *selectorJSON) (*proc, error) {
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

// --- the service ---

func registerProcessService(rt *rpcRoutes, env *Env) {
	s := &processService{env: env, m: env.Processes}
	rt.stream["/process.Process/Start"] = s.start
	rt.stream["/process.Process/Connect"] = s.connect
	rt.unary["/process.Process/List"] = s.list
	rt.unary["/process.Process/SendInput"] = s.sendInput
	rt.unary["/process.Process/SendSignal"] = s.sendSignal
	rt.unary["/process.Process/Update"] = s.update
	rt.unary["/process.Process/CloseStdin"] = s.closeStdin
	rt.unary["/process.Process/StreamInput"] = func(c *Call) (interface{}, error) {
		return nil, rpcErr(CodeUnimplemented, "process.Process/StreamInput is a client stream, which this envd does not serve: use SendInput")
	}
}

type processService struct {
	env *Env
	m   *ProcessManager
}

func procIsDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func (s *processService) start(c *Call, send func(interface{}) error) error {
	var req startRequest
	if err := c.Decode(&req); err != nil {
		return err
	}
	user, err := s.env.rpcUser(c)
	if err != nil {
		return err
	}
	cfg := req.Process
	if cfg == nil || cfg.Cmd == "" {
		return rpcErr(CodeInvalidArgument, "process.cmd is required")
	}
	_, defaultWorkdir := s.env.State.Defaults()
	var cwd string
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = resolvePath(*cfg.Cwd, user, defaultWorkdir)
		if !procIsDir(cwd) {
			return rpcErr(CodeInvalidArgument, "cwd '%s' does not exist", cwd)
		}
	} else {
		cwd = "/"
		for _, cand := range []string{defaultWorkdir, user.Home, "/"} {
			if cand != "" && procIsDir(cand) {
				cwd = cand
				break
			}
		}
	}
	args := cfg.Args
	if args == nil {
		args = []string{}
	}
	spec := &spawnSpec{
		cmd:   cfg.Cmd,
		args:  args,
		cwd:   cwd,
		env:   buildProcessEnv(user, s.env.State.EnvVars(), cfg.Envs),
		uid:   user.UID,
		gid:   user.GID,
		stdin: req.Stdin == nil || *req.Stdin,
	}
	if req.Pty != nil {
		size := ptySize{cols: 80, rows: 24}
		if req.Pty.Size != nil {
			if c := req.Pty.Size.Cols; c > 0 {
				size.cols = uint16(minUint32(uint32(c), 0xffff))
			}
			if r := req.Pty.Size.Rows; r > 0 {
				size.rows = uint16(minUint32(uint32(r), 0xffff))
			}
		}
		spec.pty = &size
	}
	sub := newSubscriber()
	p, err := s.m.start(spec, req.Tag, cfg.Envs, sub)
	if err != nil {
		return err
	}
	// Connect-Timeout-Ms on Start is the lifetime of the process itself.
	if deadline, ok := c.Ctx.Deadline(); ok {
		d := time.Until(deadline)
		if d < time.Millisecond {
			d = time.Millisecond
		}
		p.setLifetime(d)
	}
	return streamProcess(c, send, p, sub, nil)
}

func minUint32(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}

func (s *processService) connect(c *Call, send func(interface{}) error) error {
	var req selectorRequest
	if err := c.Decode(&req); err != nil {
		return err
	}
	p, err := s.m.getAny(req.Process)
	if err != nil {
		return err
	}
	sub := newSubscriber()
	end := p.subscribe(sub)
	return streamProcess(c, send, p, sub, end)
}

// streamProcess sends start{pid}, then the process's events as they come, with keepalives
// after silence, until its end (or the client leaves: the process keeps running). A deadline
// still lets the end of the process it killed through (deadlineGrace).
func streamProcess(c *Call, send func(interface{}) error, p *proc, sub *subscriber, ended *endInfo) error {
	defer p.unsubscribe(sub)
	if err := send(startMessage(p.pid)); err != nil {
		return err
	}
	if ended != nil {
		return send(procEvent{end: ended}.message())
	}
	interval := keepaliveInterval(c.Header)
	ka := time.NewTimer(interval)
	defer ka.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev.message()); err != nil {
				return err
			}
			if ev.end != nil {
				return nil
			}
			if !ka.Stop() {
				<-ka.C
			}
			ka.Reset(interval)
		case <-ka.C:
			if err := send(keepaliveMessage()); err != nil {
				return err
			}
			ka.Reset(interval)
		case <-c.Ctx.Done():
			if c.Ctx.Err() != context.DeadlineExceeded {
				return nil // the client left
			}
			grace := time.NewTimer(deadlineGrace)
			defer grace.Stop()
			for {
				select {
				case ev := <-sub.ch:
					if err := send(ev.message()); err != nil {
						return err
					}
					if ev.end != nil {
						return nil
					}
				case <-grace.C:
					return nil
				}
			}
		}
	}
}

func (s *processService) list(c *Call) (interface{}, error) {
	var req struct{}
	if err := c.Decode(&req); err != nil {
		return nil, err
	}
	res := listResponse{}
	for _, p := range s.m.list() {
		cwd := p.cwd
		res.Processes = append(res.Processes, processInfoOut{
			Config: processConfigOut{Cmd: p.cmd, Args: p.args, Envs: p.envs, Cwd: &cwd},
			Pid:    uint32(p.pid),
			Tag:    p.tag,
		})
	}
	return res, nil
}

func (s *processService) sendInput(c *Call) (interface{}, error) {
	var req sendInputRequest
	if err := c.Decode(&req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.Process)
	if err != nil {
		return nil, err
	}
	if in := req.Input; in != nil {
		switch {
		case in.Stdin != nil:
			err = p.writeStdin(c.Ctx, *in.Stdin)
		case in.Pty != nil && p.isPty:
			err = p.writePty(c.Ctx, *in.Pty)
		case in.Pty != nil:
			err = p.writeStdin(c.Ctx, *in.Pty)
		}
		if err != nil {
			return nil, err
		}
	}
	return struct{}{}, nil
}

func (s *processService) sendSignal(c *Call) (interface{}, error) {
	var req sendSignalRequest
	if err := c.Decode(&req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.Process)
	if err != nil {
		return nil, err
	}
	switch req.Signal {
	case 9:
		p.signal(syscall.SIGKILL)
	case 15:
		p.signal(syscall.SIGTERM)
	default:
		return nil, rpcErr(CodeInvalidArgument, "unsupported signal: %d", int32(req.Signal))
	}
	return struct{}{}, nil
}

func (s *processService) update(c *Call) (interface{}, error) {
	var req updateRequest
	if err := c.Decode(&req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.Process)
	if err != nil {
		return nil, err
	}
	if req.Pty != nil && req.Pty.Size != nil {
		if err := p.resize(uint32(req.Pty.Size.Cols), uint32(req.Pty.Size.Rows)); err != nil {
			return nil, err
		}
	}
	return struct{}{}, nil
}

func (s *processService) closeStdin(c *Call) (interface{}, error) {
	var req selectorRequest
	if err := c.Decode(&req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.Process)
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
