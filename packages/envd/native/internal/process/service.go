// Package process serves process.Process (packages/protocol/proto/process): Start and
// Connect stream a process's events; List, SendInput, StreamInput, SendSignal, Update and
// CloseStdin act on a running one. Each RPC (here) reads its request message and acts on the
// manager (manager.go), which keeps the processes: each with its output pump, stdin and
// signals (proc.go), started on pipes or a PTY as the caller's user (spawn.go).
package process

import (
	"context"
	"os"
	"syscall"
	"time"

	"aenv/envd/internal/connect"
	pb "aenv/envd/internal/gen/process"
	"aenv/envd/internal/users"
	"google.golang.org/protobuf/proto"
)

// Config is what the service reads of the rest of envd.
type Config struct {
	// Users answers who a call acts as and the sandbox's default workdir.
	Users *users.Resolver
	// EnvVars are the sandbox-wide env vars (POST /init), which every command gets.
	EnvVars func() map[string]string
	// Debug logs each process's end and the signals that could not be sent.
	Debug bool
}

// Service is the Process service over the processes it started.
type Service struct {
	users   *users.Resolver
	envVars func() map[string]string
	m       *Manager
}

// New is the service, with no processes yet.
func New(cfg Config) *Service {
	return &Service{users: cfg.Users, envVars: cfg.EnvVars, m: newManager(cfg.Debug)}
}

// Register serves the service's procedures on rt.
func (s *Service) Register(rt *connect.Routes) {
	rt.Stream("/process.Process/Start", s.start)
	rt.Stream("/process.Process/Connect", s.connect)
	rt.Unary("/process.Process/List", s.list)
	rt.Unary("/process.Process/SendInput", s.sendInput)
	rt.ClientStream("/process.Process/StreamInput", s.streamInput)
	rt.Unary("/process.Process/SendSignal", s.sendSignal)
	rt.Unary("/process.Process/Update", s.update)
	rt.Unary("/process.Process/CloseStdin", s.closeStdin)
}

func procIsDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func (s *Service) start(c *connect.Call, send func(proto.Message) error) error {
	req := &pb.StartRequest{}
	if err := c.Decode(req); err != nil {
		return err
	}
	user, name := s.users.Caller(c.Header)
	if user == nil {
		return connect.Errorf(connect.CodeUnauthenticated, "invalid username: '%s'", name)
	}
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.Errorf(connect.CodeInvalidArgument, "process.cmd is required")
	}
	defaultWorkdir := s.users.Workdir()
	var cwd string
	if cfg.GetCwd() != "" {
		cwd = users.ResolvePath(cfg.GetCwd(), user, defaultWorkdir)
		if !procIsDir(cwd) {
			return connect.Errorf(connect.CodeInvalidArgument, "cwd '%s' does not exist", cwd)
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
	args := cfg.GetArgs()
	if args == nil {
		args = []string{}
	}
	spec := &spawnSpec{
		cmd:   cfg.GetCmd(),
		args:  args,
		cwd:   cwd,
		env:   buildProcessEnv(user, s.envVars(), cfg.GetEnvs()),
		uid:   user.UID,
		gid:   user.GID,
		stdin: req.Stdin == nil || *req.Stdin,
	}
	if req.Pty != nil {
		size := ptySize{cols: 80, rows: 24}
		if sz := req.Pty.GetSize(); sz != nil {
			if c := sz.GetCols(); c > 0 {
				size.cols = uint16(minUint32(c, 0xffff))
			}
			if r := sz.GetRows(); r > 0 {
				size.rows = uint16(minUint32(r, 0xffff))
			}
		}
		spec.pty = &size
	}
	sub := newSubscriber()
	p, err := s.m.start(spec, req.Tag, cfg.GetEnvs(), sub)
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
	return streamProcess(c, func(ev *pb.ProcessEvent) error { return send(&pb.StartResponse{Event: ev}) }, p, sub, nil)
}

func minUint32(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}

func (s *Service) connect(c *connect.Call, send func(proto.Message) error) error {
	req := &pb.ConnectRequest{}
	if err := c.Decode(req); err != nil {
		return err
	}
	p, err := s.m.getAny(req.GetProcess())
	if err != nil {
		return err
	}
	sub := newSubscriber()
	end := p.subscribe(sub)
	return streamProcess(c, func(ev *pb.ProcessEvent) error { return send(&pb.ConnectResponse{Event: ev}) }, p, sub, end)
}

// streamProcess sends start{pid}, then the process's events as they come, with keepalives
// after silence, until its end (or the client leaves: the process keeps running), or its
// deadline (a deadline_exceeded error).
func streamProcess(c *connect.Call, send func(*pb.ProcessEvent) error, p *proc, sub *subscriber, ended *endInfo) error {
	defer p.unsubscribe(sub)
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	if ended != nil {
		return send(procEvent{end: ended}.message())
	}
	interval := connect.KeepaliveInterval(c.Header)
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
			if err := send(keepaliveEvent()); err != nil {
				return err
			}
			ka.Reset(interval)
		case <-c.Ctx.Done():
			if c.Ctx.Err() != context.DeadlineExceeded {
				return nil // the client left
			}
			// Past its deadline the stream ends with deadline_exceeded, as E2B's envd ends it:
			// the SDKs turn that into their timeout error. The process itself is killed by its
			// lifetime (setLifetime), which is the same deadline.
			return connect.Errorf(connect.CodeDeadlineExceeded, "the command ran past its timeout and was killed")
		}
	}
}

func (s *Service) list(c *connect.Call) (proto.Message, error) {
	if err := c.Decode(&pb.ListRequest{}); err != nil {
		return nil, err
	}
	res := &pb.ListResponse{}
	for _, p := range s.m.list() {
		cwd := p.cwd
		res.Processes = append(res.Processes, &pb.ProcessInfo{
			Config: &pb.ProcessConfig{Cmd: p.cmd, Args: p.args, Envs: p.envs, Cwd: &cwd},
			Pid:    uint32(p.pid),
			Tag:    p.tag,
		})
	}
	return res, nil
}

// writeInput writes one ProcessInput: stdin to the process's stdin (its PTY for a PTY
// process), pty to the PTY (or stdin, for a process without one).
func writeInput(ctx context.Context, p *proc, in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return p.writeStdin(ctx, v.Stdin)
	case *pb.ProcessInput_Pty:
		if p.isPty {
			return p.writePty(ctx, v.Pty)
		}
		return p.writeStdin(ctx, v.Pty)
	}
	return nil
}

func (s *Service) sendInput(c *connect.Call) (proto.Message, error) {
	req := &pb.SendInputRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(c.Ctx, p, req.GetInput()); err != nil {
		return nil, err
	}
	return &pb.SendInputResponse{}, nil
}

// streamInput: a start event names the process, then data events are written to it in order
// (keepalives are read and dropped) until the client ends its stream.
func (s *Service) streamInput(c *connect.Call, recv func(proto.Message) (bool, error)) (proto.Message, error) {
	var p *proc
	for {
		req := &pb.StreamInputRequest{}
		more, err := recv(req)
		if err != nil {
			return nil, err
		}
		if !more {
			return &pb.StreamInputResponse{}, nil
		}
		switch ev := req.GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			if p, err = s.m.getLive(ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.Errorf(connect.CodeFailedPrecondition, "stream input must start with a start event")
			}
			if err := writeInput(c.Ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
}

func (s *Service) sendSignal(c *connect.Call) (proto.Message, error) {
	req := &pb.SendSignalRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.GetProcess())
	if err != nil {
		return nil, err
	}
	switch req.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		p.signal(syscall.SIGKILL)
	case pb.Signal_SIGNAL_SIGTERM:
		p.signal(syscall.SIGTERM)
	default:
		return nil, connect.Errorf(connect.CodeInvalidArgument, "unsupported signal: %d", int32(req.GetSignal()))
	}
	return &pb.SendSignalResponse{}, nil
}

func (s *Service) update(c *connect.Call) (proto.Message, error) {
	req := &pb.UpdateRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.GetPty().GetSize(); size != nil {
		if err := p.resize(size.GetCols(), size.GetRows()); err != nil {
			return nil, err
		}
	}
	return &pb.UpdateResponse{}, nil
}

func (s *Service) closeStdin(c *connect.Call) (proto.Message, error) {
	req := &pb.CloseStdinRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	p, err := s.m.getLive(req.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, err
	}
	return &pb.CloseStdinResponse{}, nil
}
