package main

import "sync"

// State is what POST /init sets: token, sandbox-wide env vars, default user and workdir.
type State struct {
	mu             sync.RWMutex
	token          string // "" = no auth required
	envVars        map[string]string
	defaultUser    string
	defaultWorkdir string
}

func newState() *State { return &State{envVars: map[string]string{}} }

type initBody struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken"`
	DefaultUser    *string           `json:"defaultUser"`
	DefaultWorkdir *string           `json:"defaultWorkdir"`
	Timestamp      *string           `json:"timestamp"` // never applied: envd does not set the clock
}

func (s *State) applyInit(b *initBody) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range b.EnvVars {
		s.envVars[k] = v
	}
	if b.AccessToken != nil && *b.AccessToken != "" {
		s.token = *b.AccessToken
	}
	if b.DefaultUser != nil && *b.DefaultUser != "" {
		s.defaultUser = *b.DefaultUser
	}
	if b.DefaultWorkdir != nil && *b.DefaultWorkdir != "" {
		s.defaultWorkdir = *b.DefaultWorkdir
	}
}

func (s *State) Token() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.token
}

func (s *State) Defaults() (user, workdir string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultUser, s.defaultWorkdir
}

// EnvVars is a copy of the sandbox-wide env vars.
func (s *State) EnvVars() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]string, len(s.envVars))
	for k, v := range s.envVars {
		out[k] = v
	}
	return out
}
