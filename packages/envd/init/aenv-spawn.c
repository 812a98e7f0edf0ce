/*
 * aenv-spawn: starts envd's commands with vfork + exec.
 *
 * Node (libuv) starts a child with fork(). Inside gVisor a fork builds a whole new address
 * space from envd's (~100 MB resident), which exec then throws away: about twice the cost of
 * vfork + exec, where the child borrows the parent's address space until exec. This small
 * static helper, started once by envd, does the vfork + exec for it.
 *
 * Protocol. envd -> helper on stdin, one request per message: a 4-byte little-endian length,
 * then NUL-terminated fields:
 *   id nonce uid gid cwd stdin argc argv... envc env...
 * (uid/gid -1: unchanged; stdin "1": the child reads a socket, "0": /dev/null). For each
 * request the helper connects to envd's unix socket (argv[1]) once per stream, writes a
 * 35-byte header "<32 hex nonce> <o|e|i>\n" on it, and gives that socket to the child as
 * stdout, stderr or stdin. Helper -> envd on stdout, text lines:
 *   P <id> <pid>       started
 *   E <id> <errno>     not started: exec (or the child's set-up) failed
 *   F <id> <errno>     not started: the helper could not reach envd's socket
 *   X <pid> <status>   a child ended (raw wait status)
 * The helper exits when envd closes its stdin.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MSG (8u << 20)
#define MAX_FIELDS 65536

static const char *sock_path;
static sigset_t blocked;

static void out(const char *line) {
  size_t n = strlen(line);
  while (n > 0) {
    ssize_t w = write(1, line, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      _exit(0); /* envd is gone */
    }
    line += w;
    n -= (size_t)w;
  }
}

/* A socket to envd announcing itself as stream `kind` of the request with this nonce. */
static int stream_socket(const char *nonce, char kind) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  strncpy(sa.sun_path, sock_path, sizeof sa.sun_path - 1);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) goto fail;
  char hdr[35];
  memcpy(hdr, nonce, 32);
  hdr[32] = ' ';
  hdr[33] = kind;
  hdr[34] = '\n';
  if (write(fd, hdr, 35) != 35) goto fail;
  return fd;
fail: {
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}
}

/* PATH lookup in the child's own environment, as libuv does. */
static const char *env_path(char **envp) {
  for (char **e = envp; *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) return *e + 5;
  return "/usr/local/bin:/usr/bin:/bin";
}

static volatile int child_errno;

/* Runs in the vfork child: only syscalls, no allocation, then exec or _exit. */
__attribute__((noreturn)) static void child(const char *cwd, long uid, long gid, int in, int outfd, int errfd, char **argv, char **envp) {
  sigset_t none;
  sigemptyset(&none);
  setsid();
  if (gid >= 0) {
    if (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0) goto fail;
  }
  if (uid >= 0 && setuid((uid_t)uid) < 0) goto fail;
  if (cwd[0] && chdir(cwd) < 0) goto fail;
  if (dup2(in, 0) < 0 || dup2(outfd, 1) < 0 || dup2(errfd, 2) < 0) goto fail;
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (strchr(argv[0], '/')) {
    execve(argv[0], argv, envp);
    goto fail;
  }
  {
    const char *p = env_path(envp);
    char buf[4096];
    int saw_eacces = 0;
    while (*p) {
      const char *c = strchr(p, ':');
      size_t dl = c ? (size_t)(c - p) : strlen(p);
      size_t fl = strlen(argv[0]);
      if (dl + fl + 2 <= sizeof buf) {
        memcpy(buf, dl ? p : ".", dl ? dl : 1);
        size_t o = dl ? dl : 1;
        buf[o++] = '/';
        memcpy(buf + o, argv[0], fl + 1);
        execve(buf, argv, envp);
        if (errno == EACCES) saw_eacces = 1;
        else if (errno != ENOENT && errno != ENOTDIR) goto fail;
      }
      if (!c) break;
      p = c + 1;
    }
    errno = saw_eacces ? EACCES : ENOENT;
  }
fail:
  child_errno = errno;
  _exit(127);
}

/* vfork in a frame of its own: the child only calls child(), which never returns. */
__attribute__((noinline)) static pid_t start(const char *cwd, long uid, long gid, int in, int o, int e, char **argv,
                                            char **envp) {
  pid_t pid = vfork();
  if (pid == 0) child(cwd, uid, gid, in, o, e, argv, envp);
  return pid;
}

static char *fields[MAX_FIELDS];

static void handle(char *msg, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len && n < MAX_FIELDS;) {
    fields[n++] = msg + i;
    char *z = memchr(msg + i, 0, len - i);
    if (!z) return;
    i = (size_t)(z - msg) + 1;
  }
  if (n < 8) return;
  const char *id = fields[0], *nonce = fields[1], *cwd = fields[4];
  long uid = strtol(fields[2], NULL, 10), gid = strtol(fields[3], NULL, 10);
  int want_stdin = fields[5][0] == '1';
  size_t argc = strtoul(fields[6], NULL, 10);
  if (strlen(nonce) != 32 || argc == 0 || 7 + argc >= n) return;
  size_t envc = strtoul(fields[7 + argc], NULL, 10);
  if (8 + argc + envc > n) return;
  char **argv = calloc(argc + 1, sizeof *argv), **envp = calloc(envc + 1, sizeof *envp);
  char line[96];
  int in = -1, o = -1, e = -1, err = 0;
  char kind = 'E';
  if (!argv || !envp) {
    err = ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < argc; i++) argv[i] = fields[7 + i];
  for (size_t i = 0; i < envc; i++) envp[i] = fields[8 + argc + i];
  o = stream_socket(nonce, 'o');
  if (o >= 0) e = stream_socket(nonce, 'e');
  if (e >= 0) in = want_stdin ? stream_socket(nonce, 'i') : open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (o < 0 || e < 0 || in < 0) {
    err = errno ? errno : EIO;
    kind = 'F';
    goto done;
  }
  child_errno = 0;
  pid_t pid = start(cwd, uid, gid, in, o, e, argv, envp);
  if (pid < 0) {
    err = errno;
  } else if (child_errno) {
    /* exec failed: the child already _exit()ed; its status is reaped (and dropped) below */
    err = child_errno;
    int st;
    waitpid(pid, &st, 0);
  } else {
    snprintf(line, sizeof line, "P %s %d\n", id, (int)pid);
    out(line);
  }
done:
  if (err) {
    snprintf(line, sizeof line, "%c %s %d\n", kind, id, err);
    out(line);
  }
  if (in >= 0) close(in);
  if (o >= 0) close(o);
  if (e >= 0) close(e);
  free(argv);
  free(envp);
}

static void reap(void) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    char line[64];
    snprintf(line, sizeof line, "X %d %d\n", (int)pid, st);
    out(line);
  }
}

int main(int argc, char **argv) {
  if (argc != 2 || strlen(argv[1]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
    fprintf(stderr, "usage: aenv-spawn SOCKET\n");
    return 2;
  }
  sock_path = argv[1];
  signal(SIGPIPE, SIG_IGN);
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked, NULL);
  int sfd = signalfd(-1, &blocked, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    perror("aenv-spawn: signalfd");
    return 1;
  }
  char *buf = NULL;
  size_t have = 0, cap = 0;
  for (;;) {
    struct pollfd p[2] = {{.fd = 0, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
      }
      reap();
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (cap - have < 65536 && cap < MAX_MSG + 4 + 65536) {
        cap = cap ? cap * 2 : 131072;
        if (cap > MAX_MSG + 4 + 65536) cap = MAX_MSG + 4 + 65536;
        buf = realloc(buf, cap);
        if (!buf) return 1;
      }
      ssize_t r = read(0, buf + have, cap - have);
      if (r == 0) return 0;
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return 1;
      }
      have += (size_t)r;
      for (;;) {
        if (have < 4) break;
        uint32_t len = (uint32_t)(unsigned char)buf[0] | (uint32_t)(unsigned char)buf[1] << 8 |
                       (uint32_t)(unsigned char)buf[2] << 16 | (uint32_t)(unsigned char)buf[3] << 24;
        if (len > MAX_MSG) return 1;
        if (have < 4 + (size_t)len) break;
        handle(buf + 4, len);
        memmove(buf, buf + 4 + len, have - 4 - len);
        have -= 4 + len;
      }
    }
  }
}
