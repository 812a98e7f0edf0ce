package process

// One process: its output pump (fan-out to subscribers, the end after the output drained),
// signals, stdin and PTY writes, resizes and lifetime.

import (
	"context"
	"log"
	"os"
	"sync"
	"syscall"
	"time"

	"aenv/envd/internal/connect"
)

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
	if p.mgr.debug {
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
	if err := syscall.Kill(p.pid, sig); err != nil && p.mgr.debug {
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
		return connect.Errorf(connect.CodeInternal, "error writing to the PTY: %v", err)
	}
	return nil
}

func (p *proc) writeStdin(ctx context.Context, data []byte) error {
	if p.isPty {
		return p.writePty(ctx, data)
	}
	if p.stdin == nil {
		return connect.Errorf(connect.CodeInternal, "stdin is not enabled for this process")
	}
	p.smu.Lock()
	closed := p.stdinClosed
	p.smu.Unlock()
	if closed {
		return connect.Errorf(connect.CodeInternal, "stdin is closed")
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.smu.Lock()
	shut := p.stdinShut
	p.smu.Unlock()
	if shut {
		return connect.Errorf(connect.CodeInternal, "stdin is closed")
	}
	if err := writeWithContext(ctx, p.stdin, data); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return connect.Errorf(connect.CodeInternal, "error writing to stdin: %v", err)
	}
	return nil
}

// closeStdin: EOF once the writes before it are done.
func (p *proc) closeStdin() error {
	if p.isPty {
		return connect.Errorf(connect.CodeFailedPrecondition, "cannot close stdin of a PTY process, send Ctrl+D (0x04) instead")
	}
	if p.stdin == nil {
		return connect.Errorf(connect.CodeInternal, "stdin is not enabled for this process")
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
		return connect.Errorf(connect.CodeInternal, "tty not assigned to process")
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
		return connect.Errorf(connect.CodeInternal, "error resizing the PTY: %v", err)
	}
	return nil
}
