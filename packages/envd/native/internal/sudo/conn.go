package sudo

// One client of the service: its frames read and written, the command it asked for given its
// stdin and signals, hung up on when the client goes.
//
// Frames, both ways: 1 byte type, 4 bytes big-endian length, payload.
//   from the client: 'R' request (NUL-separated: tool, cwd, argc, args…, env…), 'I' stdin,
//                    'E' stdin closed, 'S' a signal (1 byte)
//   to the client:   'O' stdout, 'X' stderr, 'C' exit status (4 bytes), 'M' error text (exit 1)

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"aenv/envd/internal/users"
)

// conn is one client: one request, then its command's stdio and exit status.
type conn struct {
	c      *net.UnixConn
	users  *users.DB
	closed int32 // atomic: the socket is closed, nothing more is sent
	wmu    sync.Mutex

	mu     sync.Mutex
	proc   *os.Process
	exited bool
	stdin  *stdinQueue
	done   bool // failed ('M'): the socket closing no longer hangs up the command
}

type frame struct {
	typ     byte
	payload []byte
}

func (s *conn) send(typ byte, payload []byte) {
	if atomic.LoadInt32(&s.closed) != 0 {
		return
	}
	b := make([]byte, 5+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	s.wmu.Lock()
	_, err := s.c.Write(b)
	s.wmu.Unlock()
	if err != nil && atomic.LoadInt32(&s.closed) == 0 {
		// the socket's 'error': the command is hung up on
		s.signal(syscall.SIGHUP)
	}
}

func (s *conn) sendCode(code int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(int32(code)))
	s.send('C', b[:])
}

// fail sends an error the client prints as "<tool>: <message>" (exit 1) and ends the socket.
func (s *conn) fail(message string) {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.send('M', []byte(message))
	s.c.CloseWrite()
}

func (s *conn) closeConn() {
	atomic.StoreInt32(&s.closed, 1)
	s.c.Close()
}

// signal sends sig to the command, if it is still running.
func (s *conn) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.exited {
		s.proc.Signal(sig)
	}
}

func (s *conn) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// apply hands a stdin, end-of-stdin or signal frame to the command.
func (s *conn) apply(f frame) {
	s.mu.Lock()
	stdin := s.stdin
	s.mu.Unlock()
	switch f.typ {
	case 'I':
		if stdin != nil {
			stdin.write(f.payload)
		}
	case 'E':
		if stdin != nil {
			stdin.end()
		}
	case 'S':
		// the signals Node knows by name on Linux: 1…31
		if len(f.payload) == 1 && f.payload[0] >= 1 && f.payload[0] <= 31 {
			s.signal(syscall.Signal(f.payload[0]))
		}
	}
}

func (s *conn) serve() {
	defer s.closeConn()
	var hdr [5]byte
	started := false
	// Stdin and signals that arrive before the command started wait for it.
	var early []frame
	var readErr error
	for {
		if _, err := io.ReadFull(s.c, hdr[:]); err != nil {
			readErr = err
			break
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxRequest {
			s.fail("request too large")
			_, readErr = io.Copy(io.Discard, s.c)
			break
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(s.c, payload); err != nil {
			readErr = err
			break
		}
		f := frame{hdr[0], payload}
		switch {
		case f.typ == 'R':
			if started {
				continue
			}
			started = true
			s.run(payload)
			if s.running() {
				for _, e := range early {
					s.apply(e)
				}
			}
			early = nil
		case s.running():
			s.apply(f)
		case !started:
			early = append(early, f)
		}
	}
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	// 'error' hangs up on the command; so does 'close' unless the request failed
	if (readErr != nil && readErr != io.EOF && readErr != io.ErrUnexpectedEOF) || !done {
		s.signal(syscall.SIGHUP)
	}
}

// run parses and starts the request; the command's output and exit status are sent as
// they come.
