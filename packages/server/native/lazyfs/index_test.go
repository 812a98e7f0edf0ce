package main

import (
	"strings"
	"testing"
)

const key = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824-644-0-0-1000"

func TestIndexCheck(t *testing.T) {
	ok := &Index{Version: 1, Entries: []Entry{
		{Path: "", Type: "d"}, {Path: "etc", Type: "d"}, {Path: "etc/a", Type: "f", Key: key}, {Path: "l", Type: "l", Link: "etc"},
	}}
	if err := ok.check(); err != nil {
		t.Fatalf("a good index refused: %v", err)
	}
	bad := map[string][]Entry{
		"before its folder": {{Path: "etc/a", Type: "f"}, {Path: "etc", Type: "d"}},
		"bad path":          {{Path: "../x", Type: "f"}},
		"bad content key":   {{Path: "a", Type: "f", Key: "../../etc/shadow"}},
		"unknown type":      {{Path: "a", Type: "c"}},
		"root":              {{Path: "", Type: "f"}},
	}
	for want, entries := range bad {
		err := (&Index{Version: 1, Entries: entries}).check()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

func TestValidKey(t *testing.T) {
	if !validKey(key) {
		t.Fatal("a content key refused")
	}
	for _, k := range []string{"", "abc", strings.Repeat("a", 64), strings.Repeat("A", 64) + "-644-0-0-1", strings.Repeat("a", 64) + "-6/4-0-0-1"} {
		if validKey(k) {
			t.Errorf("%q accepted", k)
		}
	}
}
