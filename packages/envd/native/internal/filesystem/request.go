package filesystem

// What every handler here shares, written once: who a request acts as, the paths it names
// resolved for that account, and a failed file operation mapped onto the transport's error
// (a Connect code for the Filesystem service, an HTTP status for /files).

import (
	"net/http"
	"net/url"
	"syscall"

	"aenv/envd/internal/auth"
	"aenv/envd/internal/connect"
	"aenv/envd/internal/nodefs"
	"aenv/envd/internal/respond"
	"aenv/envd/internal/users"
	"google.golang.org/protobuf/proto"
)

// decode reads c's request message into req and answers the account the call acts as
// (Authorization: Basic base64("name:"); the default user without one).
func (s *Service) decode(c *connect.Call, req proto.Message) (*users.User, error) {
	if err := c.Decode(req); err != nil {
		return nil, err
	}
	u, name := s.users.Caller(c.Header)
	if u == nil {
		return nil, connect.Errorf(connect.CodeUnauthenticated, "invalid username: '%s'", name)
	}
	return u, nil
}

// pathRequest is a request message naming one path (Stat, MakeDir, ListDir, Remove,
// WatchDir, CreateWatcher).
type pathRequest interface {
	proto.Message
	GetPath() string
}

// decodePath is decode, and req's path resolved for that account.
func (s *Service) decodePath(c *connect.Call, req pathRequest) (string, *users.User, error) {
	u, err := s.decode(c, req)
	if err != nil {
		return "", nil, err
	}
	return s.users.Path(req.GetPath(), u), u, nil
}

// onPath is the handler of a unary call naming one path: the request decoded and its path
// resolved (decodePath), then do, whose failures are mapped onto Connect errors about that
// path (rpcError).
func onPath[T any, R interface {
	*T
	pathRequest
}](s *Service, do func(req R, p string, u *users.User) (proto.Message, error)) connect.UnaryFunc {
	return func(c *connect.Call) (proto.Message, error) {
		req := R(new(T))
		p, u, err := s.decodePath(c, req)
		if err != nil {
			return nil, err
		}
		res, err := do(req, p, u)
		if err != nil {
			return nil, rpcError(err, p)
		}
		return res, nil
	}
}

// rpcError maps a failed file operation on p onto a Connect error; a Connect error passes.
func rpcError(err error, p string) error {
	if _, ok := err.(*connect.Error); ok {
		return err
	}
	msg := err.Error()
	switch nodefs.Errno(err) {
	case syscall.ENOENT:
		return connect.Errorf(connect.CodeNotFound, "path '%s' does not exist", p)
	case syscall.ENOTDIR:
		return connect.Errorf(connect.CodeInvalidArgument, "path '%s' is not a directory: %s", p, msg)
	case syscall.EISDIR:
		return connect.Errorf(connect.CodeInvalidArgument, "path '%s' is a directory", p)
	case syscall.EEXIST:
		return connect.Errorf(connect.CodeAlreadyExists, "path '%s' already exists", p)
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return connect.Errorf(connect.CodePermissionDenied, "permission denied for '%s': %s", p, msg)
	case syscall.ENOSPC, syscall.EDQUOT:
		return connect.Errorf(connect.CodeResourceExhausted, "not enough disk space: %s", msg)
	case syscall.ENAMETOOLONG, syscall.EINVAL, syscall.ELOOP:
		return connect.Errorf(connect.CodeInvalidArgument, "invalid path '%s': %s", p, msg)
	}
	return connect.Errorf(connect.CodeInternal, "error on '%s': %s", p, msg)
}

// filesCaller checks a /files request's credentials for op ("read" or "write": the token,
// or a URL signature) and answers the account it acts as (?username=, else the default user).
func (s *Service) filesCaller(r *http.Request, q url.Values, op string) (*users.User, error) {
	if msg := auth.CheckFiles(s.token(), r.Header.Get("X-Access-Token"), q, op); msg != "" {
		return nil, respond.Err(401, msg)
	}
	return s.namedUser(q.Get("username"))
}

// namedUser is the account an HTTP request names ("" = the default user), or 401.
func (s *Service) namedUser(name string) (*users.User, error) {
	u, _ := s.users.User(name)
	if u == nil {
		return nil, respond.Err(401, "invalid username: '"+name+"'")
	}
	return u, nil
}

// httpStatus maps a failed file operation's errno onto an HTTP status.
func httpStatus(err error) int {
	switch nodefs.Errno(err) {
	case syscall.ENOENT:
		return 404
	case syscall.EISDIR, syscall.ENOTDIR, syscall.ENAMETOOLONG, syscall.EINVAL, syscall.ELOOP:
		return 400
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return 403
	case syscall.ENOSPC, syscall.EDQUOT:
		return 507
	}
	return 500
}

// openError is the answer when p cannot be opened for reading.
func openError(p string, err error) error {
	if nodefs.IsErrno(err, syscall.ENOENT) {
		return respond.Err(404, "path '"+p+"' does not exist")
	}
	return respond.Err(httpStatus(err), "cannot open '"+p+"': "+err.Error())
}

// writeError is the answer when writing target failed.
func writeError(target string, err error) error {
	status := httpStatus(err)
	if status == 404 {
		status = 400
	}
	if status == 507 {
		return respond.Err(507, "not enough disk space: "+err.Error())
	}
	return respond.Err(status, "error writing '"+target+"': "+err.Error())
}
