package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// layers ranks envd's packages: a package imports only packages of a lower rank, so the
// imports have no cycles and never point back up (and nothing imports cmd/envd). A new
// package gets its place here.
var layers = map[string]int{
	"internal/gen":            0,
	"internal/gen/process":    0,
	"internal/gen/filesystem": 0,

	"internal/connect": 1, // Connect RPC over HTTP/1.1
	"internal/respond": 1, // plain routes' answers
	"internal/auth":    1, // token and URL-signature checks
	"internal/users":   1, // accounts, who a request acts as, path resolution
	"internal/state":   1, // what POST /init sets
	"internal/nodefs":  1, // file operations as Node's fs does them
	"internal/metrics": 1, // GET /metrics's sample

	"internal/watch":      2, // inotify trees and polled watchers
	"internal/sudo":       2, // the root service behind sudo/su
	"internal/buildsteps": 2, // template build steps
	"internal/fslayer":    2, // filesystem layers (capture, apply)

	"internal/filesystem": 3, // the Filesystem service and /files
	"internal/process":    3, // the Process service

	"internal/server": 4, // the HTTP server and its routes

	"cmd/envd": 5, // flags and wiring
}

// imports are the module's own packages that dir's non-test files import.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range parsed.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if rest := strings.TrimPrefix(p, "aenv/envd/"); rest != p {
				seen[rest] = true
			}
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func TestLayers(t *testing.T) {
	root := filepath.Join("..", "..")
	found := map[string]bool{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || !info.IsDir() {
			return err
		}
		if matches, _ := filepath.Glob(filepath.Join(p, "*.go")); len(matches) > 0 {
			rel, _ := filepath.Rel(root, p)
			found[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range found {
		rank, ok := layers[pkg]
		if !ok {
			t.Errorf("%s has no place in the layers", pkg)
			continue
		}
		for _, imp := range imports(t, filepath.Join(root, pkg)) {
			if r, ok := layers[imp]; !ok || r >= rank {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports go to lower layers only", pkg, rank, imp, r)
			}
		}
	}
	for pkg := range layers {
		if !found[pkg] {
			t.Errorf("%s is in the layers but has no Go files", pkg)
		}
	}
}
