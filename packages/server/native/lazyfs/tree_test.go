package main

import (
	"reflect"
	"testing"
)

// The listing each folder answers from: its own entries only, by name, whatever order the
// index gave them in.
func TestTreeChildren(t *testing.T) {
	idx := &Index{Version: 1, Entries: []Entry{
		{Path: "", Type: "d"},
		{Path: "usr", Type: "d"},
		{Path: "etc", Type: "d"},
		{Path: "usr/lib", Type: "d"},
		{Path: "usr/bin", Type: "d"},
		{Path: "etc/passwd", Type: "f", Key: key},
		{Path: "bin", Type: "l", Link: "usr/bin"},
		{Path: "usr/lib/b", Type: "f"},
		{Path: "usr/lib/a", Type: "f"},
	}}
	tr := newTree(idx, nil)
	names := func(i int32) []string {
		var out []string
		for _, c := range tr.children[i] {
			out = append(out, tr.name(c))
		}
		return out
	}
	cases := map[int32][]string{0: {"bin", "etc", "usr"}, 1: {"bin", "lib"}, 2: {"passwd"}, 3: {"a", "b"}, 4: nil, 5: nil}
	for i, want := range cases {
		if got := names(i); !reflect.DeepEqual(got, want) {
			t.Errorf("entry %d (%q) lists %v, want %v", i, idx.Entries[i].Path, got, want)
		}
	}
	r := newRoot(idx, nil)
	if r.e != &idx.Entries[0] || len(r.t.children[0]) != 3 {
		t.Fatalf("the root is not the index's root")
	}
}
