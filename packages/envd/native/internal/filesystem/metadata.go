package filesystem

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"syscall"

	"aenv/envd/internal/respond"
)

// File metadata lives in the files' own `user.e2b.<key>` extended attributes, as the
// reference envd keeps it (visible to getfattr in the sandbox, kept by snapshots).
const metaPrefix = "user.e2b."

// setMetadata writes each key as an xattr of p (best effort on filesystems without them).
func setMetadata(p string, meta map[string]string) error {
	for k, v := range meta {
		if err := syscall.Setxattr(p, metaPrefix+k, []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}

// replaceMetadata makes meta p's whole set: keys it lacks are removed (an upload over a file
// replaces its metadata, as E2B's envd does), then meta is written.
func replaceMetadata(p string, meta map[string]string) error {
	for k := range getMetadata(p) {
		if _, keep := meta[k]; !keep {
			syscall.Removexattr(p, metaPrefix+k)
		}
	}
	return setMetadata(p, meta)
}

// getMetadata reads p's `user.e2b.*` xattrs (without following a symlink); nil when none.
func getMetadata(p string) map[string]string {
	size, err := syscall.Listxattr(p, nil)
	if err != nil || size <= 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = syscall.Listxattr(p, buf)
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, name := range bytes.Split(buf[:size], []byte{0}) {
		n := string(name)
		if !strings.HasPrefix(n, metaPrefix) || len(n) == len(metaPrefix) {
			continue
		}
		vs, err := syscall.Getxattr(p, n, nil)
		if err != nil || vs < 0 {
			continue
		}
		val := make([]byte, vs)
		if vs > 0 {
			if vs, err = syscall.Getxattr(p, n, val); err != nil {
				continue
			}
		}
		if out == nil {
			out = map[string]string{}
		}
		out[n[len(metaPrefix):]] = string(val[:vs])
	}
	return out
}

var printable = regexp.MustCompile(`^[\x20-\x7e]*$`)

// metadataFromHeaders collects `X-Metadata-<key>: value` headers.
func metadataFromHeaders(h http.Header) (map[string]string, error) {
	meta := map[string]string{}
	total := 0
	for name, vals := range h {
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, "x-metadata-") {
			continue
		}
		key := lower[len("x-metadata-"):]
		value := strings.Join(vals, ", ")
		if key == "" {
			return nil, respond.Err(400, "metadata key must not be empty")
		}
		if !printable.MatchString(key) || !printable.MatchString(value) {
			return nil, respond.Err(400, "metadata '"+key+"' must be printable ASCII")
		}
		if len(key) > 246 {
			return nil, respond.Err(400, "metadata key '"+key[:32]+"…' is too long")
		}
		total += len(key) + len(value)
		meta[key] = value
	}
	if total > 4096 {
		return nil, respond.Err(400, "metadata is too large (4096 bytes max)")
	}
	return meta, nil
}
