package sudo

// What `sudo …` or `su …` asks for, parsed the way the real tools read their options: who to run as,
// what to run, and which environment to keep. Only options that change what runs are
// honoured; password-related ones (-n, -S, -k, -A) are accepted and ignored (there is no
// password to ask for), and listing/validation (-l, -v) answer as NOPASSWD: ALL would.

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"aenv/envd/internal/users"
)

// sudoRequest is a parsed sudo/su command line: Kind "run" or "print".
type sudoRequest struct {
	Kind string
	// run
	User  string   // target account name
	Argv  []string // what to run; empty for an interactive shell of the target
	Shell bool     // through the target's shell (-s, -i, su): Argv joined into one line
	Login bool     // a login shell / environment (-i, su -)
	// PreserveEnv: keep the caller's whole environment (-E, su without -). Else
	// PreserveList (--preserve-env=A,B), when not nil, names variables kept besides env_keep.
	PreserveEnv  bool
	PreserveList []string
	ShellPath    string // explicit shell (su -s); "" for none
	// print
	Text string
	Code int
}

// sudoUsageError is a command line the tool refuses: "<tool>: <message>", exit 1.
type sudoUsageError struct{ msg string }

func (e *sudoUsageError) Error() string { return e.msg }

func sudoUsage(msg string) error { return &sudoUsageError{msg} }

const sudoVersion = "Sudo version 1.9.13p3 (aenv: commands run by envd as root)\n"

func sudoUsageText() string {
	return "usage: sudo [-EHiknSs] [-u user] [--] command [arg ...]\n       sudo -i | -s [command]\n       sudo -l | -v | -V\n"
}

func sudoPrint(text string, code int) *sudoRequest {
	return &sudoRequest{Kind: "print", Text: text, Code: code}
}

func sudoList(caller string) *sudoRequest {
	return sudoPrint("User "+caller+" may run the following commands on this sandbox:\n    (ALL : ALL) NOPASSWD: ALL\n", 0)
}

// parseSudo reads sudo's options (options.ts parseSudo).
func parseSudo(args []string, caller string) (*sudoRequest, error) {
	user := "root"
	shell, login := false, false
	preserveAll := false
	var preserveList []string
	i := 0
	value := func(flag string) (string, error) {
		i++
		if i >= len(args) {
			return "", sudoUsage("option requires an argument -- '" + flag + "'")
		}
		return args[i], nil
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		if strings.HasPrefix(a, "--") {
			// JS split("=", 2): the name and the text up to a second "=", if any.
			parts := strings.Split(a[2:], "=")
			name := parts[0]
			v, hasV := "", len(parts) > 1
			if hasV {
				v = parts[1]
			}
			switch name {
			case "preserve-env":
				if v != "" {
					preserveAll, preserveList = false, strings.Split(v, ",")
				} else {
					preserveAll, preserveList = true, nil
				}
			case "user":
				if hasV {
					user = v
				} else {
					u, err := value("u")
					if err != nil {
						return nil, err
					}
					user = u
				}
			case "login":
				login = true
			case "shell":
				shell = true
			case "set-home", "non-interactive", "stdin", "reset-timestamp":
				// no password, nothing to do
			case "version":
				return sudoPrint(sudoVersion, 0), nil
			case "list":
				return sudoList(caller), nil
			case "validate":
				return sudoPrint("", 0), nil
			case "help":
				return sudoPrint(sudoUsageText(), 0), nil
			default:
				return nil, sudoUsage("unrecognized option '--" + name + "'")
			}
			continue
		}
		// Clustered short options: -nE, -iu root
		r := []rune(a)
		for j := 1; j < len(r); j++ {
			f := string(r[j])
			rest := string(r[j+1:])
			take := func() (string, error) {
				j = len(r)
				if rest != "" {
					return rest, nil
				}
				return value(f)
			}
			switch f {
			case "u":
				u, err := take()
				if err != nil {
					return nil, err
				}
				user = u
			case "g", "p", "C", "T", "r", "t", "U":
				// group, prompt, fd limit, timeout, role, type, list-user: accepted, no effect here
				if _, err := take(); err != nil {
					return nil, err
				}
			case "h":
				return sudoPrint(sudoUsageText(), 0), nil
			case "E":
				preserveAll, preserveList = true, nil
			case "i":
				login = true
			case "s":
				shell = true
			case "H", "n", "S", "k", "K", "A", "P", "b":
				// `sudo -k` / `sudo -K` alone: nothing to forget
				if (f == "k" || f == "K") && i == len(args)-1 && len(a) == 2 {
					return sudoPrint("", 0), nil
				}
			case "V":
				return sudoPrint(sudoVersion, 0), nil
			case "v":
				return sudoPrint("", 0), nil
			case "l":
				return sudoList(caller), nil
			default:
				return nil, sudoUsage("invalid option -- '" + f + "'\n" + sudoUsageText())
			}
		}
	}
	var argv []string
	if i < len(args) {
		argv = append(argv, args[i:]...)
	}
	if len(argv) == 0 && !shell && !login {
		return nil, sudoUsage(sudoUsageText())
	}
	return &sudoRequest{
		Kind: "run", User: user, Argv: argv, Shell: shell || login, Login: login,
		PreserveEnv: preserveAll, PreserveList: preserveList,
	}, nil
}

// parseSu reads su's options (options.ts parseSu).
func parseSu(args []string) (*sudoRequest, error) {
	login, preserve := false, false
	command, hasCommand := "", false
	shellPath := ""
	user, hasUser := "", false
	var extra []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			i++
			if i >= len(args) {
				return "", sudoUsage("option '" + a + "' requires an argument")
			}
			return args[i], nil
		}
		switch {
		case a == "-" || a == "-l" || a == "--login":
			login = true
		case a == "-c" || a == "--command":
			v, err := value()
			if err != nil {
				return nil, err
			}
			command, hasCommand = v, true
		case strings.HasPrefix(a, "--command="):
			command, hasCommand = a[len("--command="):], true
		case a == "-s" || a == "--shell":
			v, err := value()
			if err != nil {
				return nil, err
			}
			shellPath = v
		case a == "-m" || a == "-p" || a == "--preserve-environment":
			preserve = true
		case a == "-g" || a == "-G" || a == "--group" || a == "--supp-group":
			if _, err := value(); err != nil {
				return nil, err
			}
		case a == "-f" || a == "-P" || a == "--pty":
			// fast shell / pty: accepted
		case a == "-h" || a == "--help":
			return sudoPrint("Usage: su [options] [-] [<user> [<argument>...]]\n", 0), nil
		case strings.HasPrefix(a, "-") && !hasUser:
			return nil, sudoUsage("invalid option -- '" + strings.TrimLeft(a, "-") + "'")
		case !hasUser:
			user, hasUser = a, true
		default:
			extra = append(extra, a)
		}
	}
	var argv []string
	if hasCommand {
		argv = append(argv, command)
	}
	argv = append(argv, extra...)
	if !hasUser {
		user = "root"
	}
	return &sudoRequest{
		Kind: "run", User: user, Argv: argv, Shell: true, Login: login,
		PreserveEnv: preserve || !login, ShellPath: shellPath,
	}, nil
}

// sudoWire is a decoded 'R' frame: the tool, the caller's cwd, its arguments and environment.
type sudoWire struct {
	Tool string
	Cwd  string
	Args []string
	Env  map[string]string
}

var sudoNumberRe = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`)

// sudoJSInteger is Number(s) when that is an integer (decodeRequest reads the count so).
func sudoJSInteger(s string) (int, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, true
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			n, err := strconv.ParseUint(s[2:], base, 63)
			if err != nil {
				return 0, false
			}
			return int(n), true
		}
	}
	if !sudoNumberRe.MatchString(s) {
		return 0, false
	}
	// Only an overflow fails here, as ±Inf: not an integer, as in JS.
	f, _ := strconv.ParseFloat(s, 64)
	if math.IsInf(f, 0) || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int(f), true
}

// decodeSudoRequest reads an 'R' payload: NUL-separated tool, cwd, argc, args…, env….
func decodeSudoRequest(b []byte) (*sudoWire, error) {
	parts := strings.Split(string(b), "\x00")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	malformed := sudoUsage("malformed request")
	if len(parts) < 3 {
		return nil, malformed
	}
	tool, cwd, rest := parts[0], parts[1], parts[3:]
	n, ok := sudoJSInteger(parts[2])
	if (tool != "sudo" && tool != "su") || !ok || n < 0 || n > len(rest) {
		return nil, malformed
	}
	env := map[string]string{}
	for _, kv := range rest[n:] {
		// `__proto__` cannot be an own key of the JS object this was.
		if eq := strings.IndexByte(kv, '='); eq > 0 && kv[:eq] != "__proto__" {
			env[kv[:eq]] = kv[eq+1:]
		}
	}
	return &sudoWire{Tool: tool, Cwd: cwd, Args: append([]string{}, rest[:n]...), Env: env}, nil
}

const sudoSecurePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sudoKeep is what sudo's env_reset keeps from the caller (Debian's env_keep defaults, roughly).
var sudoKeep = regexp.MustCompile(`^(TERM|COLORTERM|DISPLAY|LANG|LANGUAGE|LC_[A-Z_]+|TZ|COLUMNS|LINES|XAUTHORITY)$`)

// sudoCaller is who asked: their environment, name, and uid/gid ("" when unknown).
type sudoCaller struct {
	Env      map[string]string
	Name     string
	UID, GID string
}

// sudoCommand is what a run request starts: the file, its arguments, and its environment.
type sudoCommand struct {
	File string
	Args []string
	Env  map[string]string
}

// environ is Env as KEY=value lines, sorted by key.
func (c *sudoCommand) environ() []string {
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+c.Env[k])
	}
	return out
}

// sudoCommandFor is the argv and environment a parsed run request runs with (commandFor).
func sudoCommandFor(r *sudoRequest, target *users.User, caller sudoCaller) *sudoCommand {
	env := map[string]string{}
	if r.PreserveEnv {
		for k, v := range caller.Env {
			env[k] = v
		}
	} else {
		for k, v := range caller.Env {
			if sudoKeep.MatchString(k) {
				env[k] = v
			}
		}
		for _, k := range r.PreserveList {
			if v, ok := caller.Env[k]; ok {
				env[k] = v
			}
		}
	}
	keepHome := r.PreserveEnv && !r.Login
	if !keepHome || env["HOME"] == "" {
		env["HOME"] = target.Home
	}
	env["PATH"] = sudoSecurePath
	env["USER"] = target.Name
	env["LOGNAME"] = target.Name
	if r.ShellPath != "" {
		env["SHELL"] = r.ShellPath
	} else {
		env["SHELL"] = target.Shell
	}
	env["SUDO_USER"] = caller.Name
	env["SUDO_UID"] = caller.UID
	env["SUDO_GID"] = caller.GID
	env["SUDO_COMMAND"] = strings.Join(r.Argv, " ")

	shell := r.ShellPath
	if shell == "" {
		shell = target.Shell
		if shell == "" {
			shell = "/bin/sh"
		}
	}
	if !r.Shell {
		return &sudoCommand{File: r.Argv[0], Args: append([]string{}, r.Argv[1:]...), Env: env}
	}
	args := []string{}
	if r.Login {
		args = append(args, "-l")
	}
	if len(r.Argv) > 0 {
		args = append(args, "-c", strings.Join(r.Argv, " "))
	}
	return &sudoCommand{File: shell, Args: args, Env: env}
}
