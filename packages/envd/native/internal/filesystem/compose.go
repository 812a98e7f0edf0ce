package filesystem

// POST /files/compose (envd.yaml's ComposeRequest): the source files, in order, concatenated
// into the destination, which is then owned by the request's user; the sources are removed
// once the destination is on disk. What a client uploading a large file in parts in
// parallel (each part an ordinary upload) ends with. The bytes are copied in 1 MiB writes as
// an upload's are (E2B speaks of zero-copy: under gVisor a copy_file_range is the sentry's
// own copy too, so the writes cost about the same).
//
// A part is opened with O_NOFOLLOW and checked to be a regular file through its descriptor,
// so a symlink or a directory put there meanwhile is refused, not followed. The destination
// is written as an upload is (writeUpload's rules: created or truncated in place, parents made
// for the user); the destination being one of the parts is refused before anything is written.

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/respond"
)

// Parts a compose may name: each is a file opened at once.
const maxComposeParts = 10_000

type composeRequest struct {
	Destination string   `json:"destination"`
	SourcePaths []string `json:"source_paths"`
	Username    string   `json:"username"`
}

// Compose serves POST /files/compose; the caller's method and token are checked already.
func (s *Service) Compose(w http.ResponseWriter, r *http.Request) error {
	raw, err := respond.ReadBody(r, 4<<20)
	if err != nil {
		return err
	}
	var req composeRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return respond.Err(400, "invalid JSON body: "+err.Error())
	}
	if req.Destination == "" || len(req.SourcePaths) == 0 {
		return respond.Err(400, "destination and source_paths are required")
	}
	if len(req.SourcePaths) > maxComposeParts {
		return respond.Err(400, "at most 10000 source_paths")
	}
	u, err := s.namedUser(req.Username)
	if err != nil {
		return err
	}
	dest := s.users.Path(req.Destination, u)
	parts := make([]*os.File, 0, len(req.SourcePaths))
	defer func() {
		for _, f := range parts {
			f.Close()
		}
	}()
	paths := make([]string, 0, len(req.SourcePaths))
	for _, src := range req.SourcePaths {
		p := s.users.Path(src, u)
		if filepath.Clean(p) == filepath.Clean(dest) {
			return respond.Err(400, "the destination '"+dest+"' is one of the source paths")
		}
		f, err := openPart(p)
		if err != nil {
			return err
		}
		parts = append(parts, f)
		paths = append(paths, p)
	}
	readers := make([]io.Reader, len(parts))
	for i, f := range parts {
		readers[i] = f
	}
	if err := writeUpload(dest, io.MultiReader(readers...), u, nil); err != nil {
		return err
	}
	for _, p := range paths {
		os.Remove(p)
	}
	syncDir(filepath.Dir(paths[0]))
	respond.JSON(w, 200, written{Path: dest, Name: filepath.Base(dest), Type: "file"})
	return nil
}

// openPart opens one part for reading: a regular file, the last component not a symlink.
func openPart(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if nodefs.IsErrno(err, syscall.ELOOP) {
			return nil, respond.Err(400, "path '"+p+"' is a symlink")
		}
		return nil, openError(p, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, respond.Err(400, "path '"+p+"' is not a regular file")
	}
	return f, nil
}
