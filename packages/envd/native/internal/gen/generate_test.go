package gen

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedMessagesAreCurrent regenerates this folder's messages into a temporary one
// with the go:generate line's own command and compares.
func TestGeneratedMessagesAreCurrent(t *testing.T) {
	for _, tool := range []string{"protoc", "protoc-gen-go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/install-deps.sh installs it)", tool)
		}
	}
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "//go:generate protoc ") {
			args = strings.Fields(strings.TrimPrefix(line, "//go:generate protoc "))
		}
	}
	if args == nil {
		t.Fatal("generate.go has no protoc line")
	}
	out := t.TempDir()
	for i, a := range args {
		if a == "--go_out=." {
			args[i] = "--go_out=" + out
		}
	}
	if b, err := exec.Command("protoc", args...).CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	for _, f := range []string{"process/process.pb.go", "filesystem/filesystem.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, have) {
			t.Errorf("internal/gen/%s is not what packages/protocol/proto generates: run go generate ./... in packages/envd/native", f)
		}
	}
}
