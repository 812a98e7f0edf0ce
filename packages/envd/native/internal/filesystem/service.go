// Package filesystem serves the sandbox's files to its clients: the Connect service
// filesystem.Filesystem (packages/protocol/proto/filesystem; Stat, MakeDir, Move, ListDir
// and Remove here, WatchDir and the polled watchers in watch_service.go) and the HTTP routes
// /files (files.go) and /files/compose (compose.go). Everything runs as envd's own user (root
// in a sandbox); the request's user decides how paths resolve and who owns what is created.
// What every handler shares (the caller, path resolution, error mapping) is in request.go.
package filesystem

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
	"aenv/envd/internal/watch"
	"google.golang.org/protobuf/proto"
)

// Config is what the service reads of the rest of envd.
type Config struct {
	// Users answers who a request acts as and where its paths point.
	Users *users.Resolver
	// Token is the access token POST /init last set ("" = none), which /files checks.
	Token func() string
	// Debug logs what is otherwise only worth knowing when debugging (unwatchable folders).
	Debug bool
}

// Service is the Filesystem service and the /files routes; it owns the polled watchers.
type Service struct {
	users    *users.Resolver
	token    func() string
	watchers *watch.Registry
	debug    bool
}

// New is the service, with no watchers yet.
func New(cfg Config) *Service {
	return &Service{users: cfg.Users, token: cfg.Token, watchers: watch.NewRegistry(), debug: cfg.Debug}
}

// Register serves the service's procedures on rt.
func (s *Service) Register(rt *connect.Routes) {
	const pre = "/filesystem.Filesystem/"
	rt.Unary(pre+"Stat", onPath(s, s.stat))
	rt.Unary(pre+"MakeDir", onPath(s, s.makeDir))
	rt.Unary(pre+"Move", s.move)
	rt.Unary(pre+"ListDir", onPath(s, s.listDir))
	rt.Unary(pre+"Remove", onPath(s, s.remove))
	rt.Stream(pre+"WatchDir", s.watchDir)
	rt.Unary(pre+"CreateWatcher", onPath(s, s.createWatcher))
	rt.Unary(pre+"GetWatcherEvents", s.getWatcherEvents)
	rt.Unary(pre+"RemoveWatcher", s.removeWatcher)
}

// requireDir: p must exist (following symlinks) and be a directory.
func requireDir(p string) error {
	st, err := nodefs.Stat(p)
	if err != nil {
		return rpcError(err, p)
	}
	if !nodefs.IsDir(st.Mode) {
		return connect.Errorf(connect.CodeInvalidArgument, "path '%s' is not a directory", p)
	}
	return nil
}

func (s *Service) stat(_ *fspb.StatRequest, p string, _ *users.User) (proto.Message, error) {
	e, err := s.entry(p)
	if err != nil {
		return nil, err
	}
	return &fspb.StatResponse{Entry: e}, nil
}

func (s *Service) makeDir(_ *fspb.MakeDirRequest, p string, u *users.User) (proto.Message, error) {
	if st, err := nodefs.Stat(p); err == nil {
		if nodefs.IsDir(st.Mode) {
			return nil, connect.Errorf(connect.CodeAlreadyExists, "directory '%s' already exists", p)
		}
		return nil, connect.Errorf(connect.CodeInvalidArgument, "path '%s' already exists but it is not a directory", p)
	} else if !nodefs.IsErrno(err, syscall.ENOENT) {
		return nil, err
	}
	if _, err := mkdirpOwned(p, u); err != nil {
		if nodefs.IsErrno(err, syscall.EEXIST) {
			return nil, connect.Errorf(connect.CodeInvalidArgument, "path '%s' already exists but it is not a directory", p)
		}
		return nil, err
	}
	e, err := s.entry(p)
	if err != nil {
		return nil, err
	}
	return &fspb.MakeDirResponse{Entry: e}, nil
}

// move names two paths: its errors are about the source until it is found, then about the
// destination.
func (s *Service) move(c *connect.Call) (proto.Message, error) {
	req := &fspb.MoveRequest{}
	u, err := s.decode(c, req)
	if err != nil {
		return nil, err
	}
	src := s.users.Path(req.GetSource(), u)
	dst := s.users.Path(req.GetDestination(), u)
	if _, err := nodefs.Lstat(src); err != nil {
		return nil, rpcError(err, src)
	}
	if err := moveTree(src, dst, u); err != nil {
		return nil, rpcError(err, dst)
	}
	e, err := s.entry(dst)
	if err != nil {
		return nil, rpcError(err, dst)
	}
	return &fspb.MoveResponse{Entry: e}, nil
}

// moveTree renames src to dst, its missing parents made for u; across filesystems, a copy
// (timestamps kept, symlinks verbatim) and then the source's removal.
func moveTree(src, dst string, u *users.User) error {
	if _, err := mkdirpOwned(filepath.Dir(dst), u); err != nil {
		return err
	}
	err := syscall.Rename(src, dst)
	if err == nil {
		return nil
	}
	if err != syscall.EXDEV {
		if n := nodefs.Errno(err); n != 0 {
			err = &nodefs.Error{Errno: n, Call: "rename", Path: src, Dest: dst}
		}
		return err
	}
	if err := nodefs.CopyTree(src, dst); err != nil {
		return err
	}
	if err := os.RemoveAll(src); err != nil {
		return nodefs.RemoveError(err)
	}
	return nil
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

func listInto(dir, display string, depth uint32, acc *users.Accounts, out *[]*fspb.EntryInfo, isRoot bool) error {
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
			listInto(abs, disp, depth-1, acc, out, false)
		}
	}
	return nil
}

func (s *Service) listDir(req *fspb.ListDirRequest, p string, _ *users.User) (proto.Message, error) {
	if err := requireDir(p); err != nil {
		return nil, err
	}
	depth := req.GetDepth()
	if depth < 1 {
		depth = 1
	}
	var out []*fspb.EntryInfo
	if err := listInto(p, p, depth, s.users.DB.Accounts(), &out, true); err != nil {
		return nil, err
	}
	return &fspb.ListDirResponse{Entries: out}, nil
}

func (s *Service) remove(_ *fspb.RemoveRequest, p string, _ *users.User) (proto.Message, error) {
	// as Node's fs.rm(p, {recursive, force}): lstat first (a missing path is fine)
	if _, err := nodefs.Lstat(p); err != nil {
		if nodefs.IsErrno(err, syscall.ENOENT) {
			return &fspb.RemoveResponse{}, nil
		}
		return nil, err
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, nodefs.RemoveError(err)
	}
	return &fspb.RemoveResponse{}, nil
}
