/*
 * aenv-init: PID 1 of every sandbox. Starts envd (its arguments) and reaps every process
 * that ends up orphaned to it — Node cannot wait() for children it did not spawn, so with
 * envd as PID 1 background jobs of finished commands stayed zombies. Signals sent to PID 1
 * are passed on to envd; when envd exits, so does init, with envd's status.
 * Built static so it runs in any root filesystem.
 *
 * It also starts envd's commands, with vfork + exec. Node (libuv) forks: inside gVisor a fork
 * builds a whole copy of envd's address space (~100 MB resident) that exec throws away at
 * once, about twice the cost of a vfork, where the child borrows the parent's address space
 * until exec. Doing it here costs no extra process.
 *
 * Spawn protocol. envd connects to the unix socket named by AENV_SPAWN_SOCKET in its
 * environment (in a 0700 directory of root's; init accepts one connection, then removes it).
 * With `aenv-init --spawner` there is no envd to start: requests come on stdin, answers go to
 * stdout (tests, and envd outside aenv-init). envd -> init, one request per message: a 4-byte
 * little-endian length, then NUL-terminated fields:
 *   id nonce socket uid gid cwd stdin argc argv... envc env...
 * (uid/gid -1: unchanged; stdin "1": the child reads a socket, "0": /dev/null). For each
 * request init connects to envd's unix socket `socket` once per stream, writes a 35-byte
 * header "<32 hex nonce> <o|e|i>\n" on it, and gives that socket to the child as stdout,
 * stderr or stdin. init -> envd, text lines:
 *   P <id> <pid>       started
 *   E <id> <errno>     not started: exec (or the child's set-up) failed
 *   F <id> <errno>     not started: init could not reach envd's socket
 *   X <pid> <status>   a child it started ended (raw wait status)
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
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MSG (8u << 20)
#define MAX_FIELDS 65536

static pid_t envd = -1;
static int ctl_in = -1, ctl_out = -1;

/* pids of the commands started for envd (their exits are reported; orphans' are not) */
static pid_t *started;
static size_t n_started, cap_started;

static void track(pid_t pid) {
  if (n_started == cap_started) {
    size_t cap = cap_started ? cap_started * 2 : 64;
    pid_t *p = realloc(started, cap * sizeof *p);
    if (!p) return;
    started = p;
    cap_started = cap;
  }
  started[n_started++] = pid;
}

static int untrack(pid_t pid) {
  for (size_t i = 0; i < n_started; i++) {
    if (started[i] == pid) {
      started[i] = started[--n_started];
      return 1;
    }
  }
  return 0;
}

static void ctl_closed(void) {
  if (ctl_in >= 0) close(ctl_in);
  if (ctl_out >= 0 && ctl_out != ctl_in) close(ctl_out);
  ctl_in = ctl_out = -1;
}

static void out(const char *line) {
  size_t n = strlen(line);
  while (n > 0 && ctl_out >= 0) {
    ssize_t w = send(ctl_out, line, n, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = write(ctl_out, line, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      ctl_closed(); /* envd is gone */
      return;
    }
    line += w;
    n -= (size_t)w;
  }
}

/* A socket to envd announcing itself as stream `kind` of the request with this nonce. */
static int stream_socket(const char *path, const char *nonce, char kind) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    goto fail;
  }
  strcpy(sa.sun_path, path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) goto fail;
  char hdr[35];
  memcpy(hdr, nonce, 32);
  hdr[32] = ' ';
  hdr[33] = kind;
  hdr[34] = '\n';
  if (send(fd, hdr, 35, MSG_NOSIGNAL) != 35) goto fail;
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

/* Runs in the vfork child: only syscalls on the parent's memory, then exec or _exit. */
__attribute__((noreturn)) static void child(const char *cwd, long uid, long gid, int in, int outfd, int errfd,
                                            char **argv, char **envp) {
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
  if (n < 9) return;
  const char *id = fields[0], *nonce = fields[1], *path = fields[2], *cwd = fields[5];
  long uid = strtol(fields[3], NULL, 10), gid = strtol(fields[4], NULL, 10);
  int want_stdin = fields[6][0] == '1';
  size_t argc = strtoul(fields[7], NULL, 10);
  if (strlen(id) > 20 || strlen(nonce) != 32 || argc == 0 || 8 + argc >= n) return;
  size_t envc = strtoul(fields[8 + argc], NULL, 10);
  if (9 + argc + envc > n) return;
  char **argv = calloc(argc + 1, sizeof *argv), **envp = calloc(envc + 1, sizeof *envp);
  char line[96];
  int in = -1, o = -1, e = -1, err = 0;
  char kind = 'E';
  if (!argv || !envp) {
    err = ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < argc; i++) argv[i] = fields[8 + i];
  for (size_t i = 0; i < envc; i++) envp[i] = fields[9 + argc + i];
  errno = 0;
  o = stream_socket(path, nonce, 'o');
  if (o >= 0) e = stream_socket(path, nonce, 'e');
  if (e >= 0) in = want_stdin ? stream_socket(path, nonce, 'i') : open("/dev/null", O_RDONLY | O_CLOEXEC);
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
    /* exec failed: the child already _exit()ed; its status goes nowhere */
    err = child_errno;
    int st;
    waitpid(pid, &st, 0);
  } else {
    track(pid);
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

/* Reaps whatever ended; returns 1 (and sets *status) once envd has. */
static int reap(int *status) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return 0;
    if (pid == envd) {
      *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return 1;
    }
    if (untrack(pid)) {
      char line[64];
      snprintf(line, sizeof line, "X %d %d\n", (int)pid, st);
      out(line);
    }
  }
}

static char *buf;
static size_t have, cap;

/* Reads what envd sent and runs every complete request; 0 when the channel closed. */
static int read_requests(void) {
  if (cap - have < 65536 && cap < MAX_MSG + 4 + 65536) {
    size_t c = cap ? cap * 2 : 131072;
    if (c > MAX_MSG + 4 + 65536) c = MAX_MSG + 4 + 65536;
    char *b = realloc(buf, c);
    if (!b) return 0;
    buf = b;
    cap = c;
  }
  ssize_t r = read(ctl_in, buf + have, cap - have);
  if (r == 0) return 0;
  if (r < 0) return errno == EINTR || errno == EAGAIN;
  have += (size_t)r;
  while (have >= 4) {
    uint32_t len = (uint32_t)(unsigned char)buf[0] | (uint32_t)(unsigned char)buf[1] << 8 |
                   (uint32_t)(unsigned char)buf[2] << 16 | (uint32_t)(unsigned char)buf[3] << 24;
    if (len > MAX_MSG) return 0;
    if (have < 4 + (size_t)len) break;
    handle(buf + 4, len);
    memmove(buf, buf + 4 + len, have - 4 - len);
    have -= 4 + len;
  }
  return 1;
}

/* The socket envd connects to, in a fresh 0700 directory; -1 if none could be made. */
static int spawn_listener(char *path, size_t size, char *dir, size_t dsize) {
  const char *bases[] = {"/dev/shm", "/tmp"};
  for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
    snprintf(dir, dsize, "%s/.aenv-init-XXXXXX", bases[i]);
    if (!mkdtemp(dir)) continue;
    snprintf(path, size, "%s/s", dir);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0) return fd;
    if (fd >= 0) close(fd);
    unlink(path);
    rmdir(dir);
  }
  return -1;
}

int main(int argc, char **argv) {
  int spawner_only = argc == 2 && strcmp(argv[1], "--spawner") == 0;
  if (argc < 2) {
    fprintf(stderr, "usage: aenv-init PROGRAM [ARGS...] | aenv-init --spawner\n");
    return 2;
  }
  sigset_t mask;
  sigemptyset(&mask);
  int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
  sigaddset(&mask, SIGCHLD);
  for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++) sigaddset(&mask, forwarded[i]);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    perror("aenv-init: signalfd");
    return 1;
  }
  char path[108], dir[96];
  int listener = -1;
  if (spawner_only) {
    ctl_in = 0;
    ctl_out = 1;
  } else {
    listener = spawn_listener(path, sizeof path, dir, sizeof dir);
    envd = fork();
    if (envd < 0) {
      perror("aenv-init: fork");
      return 1;
    }
    if (envd == 0) {
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, NULL);
      if (listener >= 0) setenv("AENV_SPAWN_SOCKET", path, 1);
      execv(argv[1], argv + 1);
      perror("aenv-init: exec");
      _exit(127);
    }
  }
  for (;;) {
    struct pollfd p[3] = {
        {.fd = sfd, .events = POLLIN},
        {.fd = ctl_in, .events = POLLIN},
        {.fd = listener, .events = POLLIN},
    };
    if (poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      perror("aenv-init: poll");
      return 1;
    }
    if (p[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      int reaped = 0;
      while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) reaped = 1;
        else if (envd > 0) kill(envd, (int)si.ssi_signo);
      }
      int status;
      if (reaped && reap(&status)) return status;
    }
    if (p[2].revents & POLLIN) {
      /* envd's connection; nobody else's once it is taken */
      int c = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        ctl_in = ctl_out = c;
        close(listener);
        listener = -1;
        unlink(path);
        rmdir(dir);
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!read_requests()) {
        ctl_closed();
        if (spawner_only) return 0;
      }
    }
  }
}
