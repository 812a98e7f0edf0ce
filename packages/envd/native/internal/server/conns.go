package server

import (
	"net"
	"sync"
)

// connSet tracks open client connections (quiesce closes them).
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	s.m[c] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// closeAllBut closes every tracked connection except `keep`.
func (s *connSet) closeAllBut(keep net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		if c != keep {
			c.Close()
			delete(s.m, c)
		}
	}
}
