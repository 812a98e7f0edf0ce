// Package state holds what POST /init sets: the access token, the sandbox-wide env vars,
// the default user and workdir.
package state

import "sync"

// State is what POST /init sets: token, sandbox-wide env vars, default user and workdir.
type State struct {
	mu             sync.RWMutex
	token          string // "" = no auth required
	envVars        map[string]string
	defaultUser    string
	defaultWorkdir string
}

// New is the state before any POST /init: token "" is no token required.
func New(token string) *State { return &State{token: token, envVars: map[string]string{}} }

// InitBody is POST /init's JSON body.
type InitBody struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken"`
	DefaultUser    *string           `json:"defaultUser"`
	DefaultWorkdir *string           `json:"defaultWorkdir"`
	Timestamp      *string           `json:"timestamp"` // never applied: envd does not set the clock
}

// Apply sets what b sets (an empty value changes nothing; env vars are added).
func (s *State) Apply(b *InitBody) {
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

// Token is the access token ("" = none required).
func (s *State) Token() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.token
}

// Defaults are the default user and workdir ("" where none was set).
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
