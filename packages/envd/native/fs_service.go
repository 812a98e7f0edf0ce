package main

// filesystem.Filesystem (packages/protocol/proto/filesystem): Stat, MakeDir, Move, ListDir
// and Remove here, WatchDir and the polling watchers in fs_watch_service.go. Everything runs
// as envd's own user (root in a sandbox); the RPC's user decides how paths resolve and who
// owns what MakeDir and Move create.

import (
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"unicode/utf8"

	"aenv/envd/internal/connect"
	fspb "aenv/envd/internal/gen/filesystem"
	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/users"
	"google.golang.org/protobuf/proto"
)

type fsService struct{ env *Env }

func registerFilesystemService(rt *connect.Routes, env *Env) {
	s := &fsService{env: env}
	const pre = "/filesystem.Filesystem/"
	rt.Unary(pre+"Stat", s.stat)
	rt.Unary(pre+"MakeDir", s.makeDir)
	rt.Unary(pre+"Move", s.move)
	rt.Unary(pre+"ListDir", s.listDir)
	rt.Unary(pre+"Remove", s.remove)
	rt.Stream(pre+"WatchDir", s.watchDir)
	rt.Unary(pre+"CreateWatcher", s.createWatcher)
	rt.Unary(pre+"GetWatcherEvents", s.getWatcherEvents)
	rt.Unary(pre+"RemoveWatcher", s.removeWatcher)
}

// resolveFor is the request's path resolved for the RPC's user.
func (s *fsService) resolveFor(c *connect.Call, p string) (string, *users.User, error) {
	u, err := s.env.rpcUser(c)
	if err != nil {
		return "", nil, err
	}
	return s.env.resolvePathFor(p, u), u, nil
}

// requireDir: p must exist (following symlinks) and be a directory.
func requireDir(p string) error {
	st, err := nodefs.Stat(p)
	if err != nil {
		return fsRPCError(err, p)
	}
	if !nodefs.IsDir(st.Mode) {
		return connect.Errorf(connect.CodeInvalidArgument, "path '%s' is not a directory", p)
	}
	return nil
}

func (s *fsService) stat(c *connect.Call) (proto.Message, error) {
	req := &fspb.StatRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	rp := req.GetPath()
	p, _, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	e, err := s.entryFor(p)
	if err != nil {
		return nil, fsRPCError(err, p)
	}
	return &fspb.StatResponse{Entry: e}, nil
}

func (s *fsService) makeDir(c *connect.Call) (proto.Message, error) {
	req := &fspb.MakeDirRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	rp := req.GetPath()
	p, u, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	if st, err := nodefs.Stat(p); err == nil {
		if nodefs.IsDir(st.Mode) {
			return nil, connect.Errorf(connect.CodeAlreadyExists, "directory '%s' already exists", p)
		}
		return nil, connect.Errorf(connect.CodeInvalidArgument, "path '%s' already exists but it is not a directory", p)
	} else if !nodefs.IsErrno(err, syscall.ENOENT) {
		return nil, fsRPCError(err, p)
	}
	if _, err := mkdirpOwnedFs(p, u); err != nil {
		if nodefs.IsErrno(err, syscall.EEXIST) {
			return nil, connect.Errorf(connect.CodeInvalidArgument, "path '%s' already exists but it is not a directory", p)
		}
		return nil, fsRPCError(err, p)
	}
	e, err := s.entryFor(p)
	if err != nil {
		return nil, fsRPCError(err, p)
	}
	return &fspb.MakeDirResponse{Entry: e}, nil
}

func (s *fsService) move(c *connect.Call) (proto.Message, error) {
	req := &fspb.MoveRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	rsrc, rdst := req.GetSource(), req.GetDestination()
	u, err := s.env.rpcUser(c)
	if err != nil {
		return nil, err
	}
	src := s.env.resolvePathFor(rsrc, u)
	dst := s.env.resolvePathFor(rdst, u)
	if _, err := nodefs.Lstat(src); err != nil {
		return nil, fsRPCError(err, src)
	}
	if _, err := mkdirpOwnedFs(filepath.Dir(dst), u); err != nil {
		return nil, fsRPCError(err, dst)
	}
	if err := syscall.Rename(src, dst); err != nil {
		if err != syscall.EXDEV {
			if n := nodefs.Errno(err); n != 0 {
				err = &nodefs.Error{Errno: n, Call: "rename", Path: src, Dest: dst}
			}
			return nil, fsRPCError(err, dst)
		}
		// another filesystem: copy (timestamps kept, symlinks verbatim), then remove the source
		if err := nodefs.CopyTree(src, dst); err != nil {
			return nil, fsRPCError(err, dst)
		}
		if err := os.RemoveAll(src); err != nil {
			return nil, fsRPCError(nodefs.RemoveError(err), dst)
		}
	}
	e, err := s.entryFor(dst)
	if err != nil {
		return nil, fsRPCError(err, dst)
	}
	return &fspb.MoveResponse{Entry: e}, nil
}

// fsLess orders names as JavaScript's `<` on strings does (UTF-16 code units).
func fsLess(a, b string) bool {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ka, kb := utf16Key(ra), utf16Key(rb)
			if ka != kb {
				return ka < kb
			}
			return ra < rb
		}
		a, b = a[na:], b[nb:]
	}
	return a == "" && b != ""
}

func utf16Key(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + ((r - 0x10000) >> 10)
	}
	return r
}

func (s *fsService) listInto(dir, display string, depth uint32, acc *users.Accounts, out *[]*fspb.EntryInfo, isRoot bool) error {
	d, err := os.Open(dir)
	if err != nil {
		if isRoot {
			return nodefs.Wrap("scandir", dir, err)
		}
		return nil // unreadable or vanished subdirectory: skipped
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		if isRoot {
			return nodefs.Wrap("scandir", dir, err)
		}
		return nil
	}
	sort.Slice(names, func(i, j int) bool { return fsLess(names[i], names[j]) })
	for _, n := range names {
		abs := filepath.Join(dir, n)
		st, err := nodefs.Lstat(abs)
		if err != nil {
			continue // vanished meanwhile
		}
		disp := filepath.Join(display, n)
		*out = append(*out, entryFromStat(abs, st, acc, disp))
		if depth > 1 && nodefs.IsDir(st.Mode) {
			s.listInto(abs, disp, depth-1, acc, out, false)
		}
	}
	return nil
}

func (s *fsService) listDir(c *connect.Call) (proto.Message, error) {
	req := &fspb.ListDirRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	rp := req.GetPath()
	depth := req.GetDepth()
	p, _, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	if err := requireDir(p); err != nil {
		return nil, err
	}
	if depth < 1 {
		depth = 1
	}
	var out []*fspb.EntryInfo
	if err := s.listInto(p, p, depth, s.env.Users.Accounts(), &out, true); err != nil {
		return nil, fsRPCError(err, p)
	}
	return &fspb.ListDirResponse{Entries: out}, nil
}

func (s *fsService) remove(c *connect.Call) (proto.Message, error) {
	req := &fspb.RemoveRequest{}
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	rp := req.GetPath()
	p, _, err := s.resolveFor(c, rp)
	if err != nil {
		return nil, err
	}
	// as Node's fs.rm(p, {recursive, force}): lstat first (a missing path is fine)
	if _, err := nodefs.Lstat(p); err != nil {
		if nodefs.IsErrno(err, syscall.ENOENT) {
			return &fspb.RemoveResponse{}, nil
		}
		return nil, fsRPCError(err, p)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, fsRPCError(nodefs.RemoveError(err), p)
	}
	return &fspb.RemoveResponse{}, nil
}
