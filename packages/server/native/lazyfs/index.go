package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Entry is one path of an image tree, as the server writes it (templates/tree-index.ts).
type Entry struct {
	Path  string `json:"p"`
	Type  string `json:"t"` // "d", "f" or "l"
	Mode  uint32 `json:"m"` // permission and special bits (07777)
	UID   uint32 `json:"u"`
	GID   uint32 `json:"g"`
	Size  uint64 `json:"s"`
	Mtime int64  `json:"mt"`
	Key   string `json:"k,omitempty"` // content key of a file with bytes
	Link  string `json:"l,omitempty"` // symlink target
}

// Index is a whole tree: parents come before their children, the root is Path "".
type Index struct {
	Version int     `json:"v"`
	Entries []Entry `json:"entries"`
}

func readIndex(file string) (*Index, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var idx Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("index %s: %w", file, err)
	}
	if idx.Version != 1 {
		return nil, fmt.Errorf("index %s: version %d, want 1", file, idx.Version)
	}
	return &idx, idx.check()
}

// check refuses what the tree builder would have to guess at: unknown types, names that are
// not single components, keys that are not content keys, children before their parents.
func (idx *Index) check() error {
	dirs := map[string]bool{"": true}
	for _, e := range idx.Entries {
		if e.Path == "" {
			if e.Type != "d" {
				return fmt.Errorf("the root is not a directory")
			}
			continue
		}
		parts := strings.Split(e.Path, "/")
		for _, p := range parts {
			if p == "" || p == "." || p == ".." {
				return fmt.Errorf("bad path %q", e.Path)
			}
		}
		parent := strings.Join(parts[:len(parts)-1], "/")
		if !dirs[parent] {
			return fmt.Errorf("%q comes before its folder", e.Path)
		}
		switch e.Type {
		case "d":
			dirs[e.Path] = true
		case "f":
			if e.Key != "" && !validKey(e.Key) {
				return fmt.Errorf("%q: bad content key", e.Path)
			}
		case "l":
		default:
			return fmt.Errorf("%q: unknown type %q", e.Path, e.Type)
		}
	}
	return nil
}

// validKey: `<sha256 hex>-<mode octal>-<uid>-<gid>-<mtime>`, as the content store names entries.
func validKey(k string) bool {
	parts := strings.Split(k, "-")
	if len(parts) != 5 || len(parts[0]) != 64 {
		return false
	}
	for _, c := range k {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}
