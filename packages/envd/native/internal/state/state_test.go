package state

import "testing"

func TestApply(t *testing.T) {
	s := New("first")
	str := func(v string) *string { return &v }
	s.Apply(&InitBody{EnvVars: map[string]string{"A": "1", "B": "2"}, DefaultUser: str("user"), DefaultWorkdir: str("/w")})
	s.Apply(&InitBody{EnvVars: map[string]string{"B": "3"}, AccessToken: str(""), DefaultUser: str(""), DefaultWorkdir: nil})
	if s.Token() != "first" {
		t.Fatalf("an empty token changes nothing: %q", s.Token())
	}
	if u, wd := s.Defaults(); u != "user" || wd != "/w" {
		t.Fatalf("empty or absent defaults change nothing: %q %q", u, wd)
	}
	env := s.EnvVars()
	if len(env) != 2 || env["A"] != "1" || env["B"] != "3" {
		t.Fatalf("env vars are added to: %v", env)
	}
	env["A"] = "changed"
	if s.EnvVars()["A"] != "1" {
		t.Fatal("EnvVars is a copy")
	}
	s.Apply(&InitBody{AccessToken: str("second")})
	if s.Token() != "second" {
		t.Fatal("a token replaces the last")
	}
}
