/*
 * aenv-sudo: `sudo` and `su` inside a sandbox. runsc sets no_new_privs, so a setuid sudo
 * cannot gain root; instead this client asks envd (already root in the sandbox) to run the
 * command over a local socket only processes in this sandbox can reach. The sandbox is the
 * security boundary: root inside it is expected, as E2B's passwordless sudo gives.
 *
 * It sends its name (sudo or su), arguments, environment and working directory; envd parses
 * the options and runs the command. Then stdin flows to envd, the command's stdout and
 * stderr flow back, and the command's exit status becomes this process's. Built static so it
 * runs in any root filesystem.
 *
 * Frames, both ways: 1 byte type, 4 bytes big-endian length, payload.
 *   to envd:   'R' request (NUL-separated: tool, cwd, argc, args..., env...), 'I' stdin,
 *              'E' stdin closed, 'S' a signal (1 byte)
 *   from envd: 'O' stdout, 'X' stderr, 'C' exit status (4 bytes), 'M' error text (exit 1)
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOCKET_PATH "/run/aenv/sudo.sock"

extern char **environ;
static int sock = -1;
static volatile sig_atomic_t pending_signal = 0;

static void on_signal(int sig) { pending_signal = sig; }

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int send_frame(char type, const void *data, uint32_t len) {
  unsigned char h[5] = {(unsigned char)type, (unsigned char)(len >> 24), (unsigned char)(len >> 16),
                        (unsigned char)(len >> 8), (unsigned char)len};
  if (write_all(sock, h, 5) < 0) return -1;
  return len ? write_all(sock, data, len) : 0;
}

/* Appends s and a NUL to the growing request buffer. */
static int append(char **buf, size_t *len, size_t *cap, const char *s) {
  size_t n = strlen(s) + 1;
  if (*len + n > *cap) {
    size_t c = (*cap + n) * 2;
    char *b = realloc(*buf, c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
  }
  memcpy(*buf + *len, s, n);
  *len += n;
  return 0;
}

int main(int argc, char **argv) {
  const char *name = strrchr(argv[0], '/');
  name = name ? name + 1 : argv[0];
  const char *tool = strcmp(name, "su") == 0 ? "su" : "sudo";

  sock = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, SOCKET_PATH, sizeof addr.sun_path - 1);
  if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
    fprintf(stderr, "%s: aenv's root service (envd, %s) is not reachable: %s\n", tool, SOCKET_PATH,
            strerror(errno));
    return 1;
  }

  char *req = NULL;
  size_t len = 0, cap = 0;
  char cwd[4096];
  char count[16];
  if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
  snprintf(count, sizeof count, "%d", argc - 1);
  int bad = append(&req, &len, &cap, tool) || append(&req, &len, &cap, cwd) || append(&req, &len, &cap, count);
  for (int i = 1; i < argc && !bad; i++) bad = append(&req, &len, &cap, argv[i]);
  for (char **e = environ; *e && !bad; e++) bad = append(&req, &len, &cap, *e);
  if (bad || send_frame('R', req, (uint32_t)len) < 0) {
    fprintf(stderr, "%s: cannot send the request to envd\n", tool);
    return 1;
  }
  free(req);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGQUIT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  int stdin_open = 1;
  static char buf[65536];
  for (;;) {
    if (pending_signal) {
      unsigned char s = (unsigned char)pending_signal;
      pending_signal = 0;
      send_frame('S', &s, 1);
    }
    struct pollfd fds[2] = {{sock, POLLIN, 0}, {0, POLLIN, 0}};
    int n = poll(fds, stdin_open ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (stdin_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = read(0, buf, sizeof buf);
      if (r > 0) {
        if (send_frame('I', buf, (uint32_t)r) < 0) return 1;
      } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        stdin_open = 0;
        send_frame('E', NULL, 0);
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      unsigned char h[5];
      if (read_all(sock, h, 5) < 0) {
        fprintf(stderr, "%s: envd closed the connection\n", tool);
        return 1;
      }
      uint32_t flen = ((uint32_t)h[1] << 24) | ((uint32_t)h[2] << 16) | ((uint32_t)h[3] << 8) | h[4];
      char *data = flen ? malloc(flen + 1) : NULL;
      if (flen && (!data || read_all(sock, data, flen) < 0)) return 1;
      if (h[0] == 'O') write_all(1, data, flen);
      else if (h[0] == 'X') write_all(2, data, flen);
      else if (h[0] == 'M') {
        data[flen] = 0;
        fprintf(stderr, "%s: %s\n", tool, data);
        return 1;
      } else if (h[0] == 'C' && flen == 4) {
        unsigned char *d = (unsigned char *)data;
        int code = (int)(((uint32_t)d[0] << 24) | ((uint32_t)d[1] << 16) | ((uint32_t)d[2] << 8) | d[3]);
        return code;
      }
      free(data);
    }
  }
}
