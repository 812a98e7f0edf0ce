/*
 * aenv-xattr: envd's access to the `user.e2b.*` extended attributes that hold E2B file
 * metadata (Node has no xattr API). Symlinks are not followed. Keys and values travel in
 * hex, so any bytes pass.
 *   aenv-xattr get PATH...            one line per attribute: INDEX TAB KEYHEX TAB VALUEHEX
 *                                     (INDEX = position of PATH; unreadable paths are skipped)
 *   aenv-xattr set PATH [KEYHEX VALUEHEX]...   replaces every user.e2b.* attribute of PATH
 *   aenv-xattr serve                  the same calls, many, over stdin/stdout (envd keeps one
 *                                     running: a process start per call costs ~40 ms in gVisor).
 *                                     Request: u32 LE length, then the arguments, each ended by
 *                                     NUL. Reply: u32 LE length, then the exit status (1 byte)
 *                                     and what the call printed (stdout, or stderr on failure).
 *                                     Ends at EOF; a malformed request ends it with status 2.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PREFIX "user.e2b."

/* Largest request: 256 paths of PATH_MAX, or one set with its values in hex. */
#define MAX_REQUEST (8u << 20)

static void hex_out(FILE *out, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(out, "%02x", (unsigned char)s[i]);
}

static int unhex(const char *h, char *out, size_t *n) {
  size_t len = strlen(h);
  if (len % 2) return -1;
  for (size_t i = 0; i < len / 2; i++) {
    unsigned int b;
    if (sscanf(h + 2 * i, "%2x", &b) != 1) return -1;
    out[i] = (char)b;
  }
  *n = len / 2;
  return 0;
}

static int get(FILE *out, int index, const char *path) {
  static char names[65536], value[65536];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n < 0) return 0;
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, PREFIX, strlen(PREFIX)) != 0) continue;
    ssize_t v = lgetxattr(path, k, value, sizeof value);
    if (v < 0) continue;
    const char *key = k + strlen(PREFIX);
    fprintf(out, "%d\t", index);
    hex_out(out, key, strlen(key));
    fputc('\t', out);
    hex_out(out, value, (size_t)v);
    fputc('\n', out);
  }
  return 0;
}

static int set(FILE *err, const char *path, int argc, char **argv) {
  static char names[65536];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n < 0) {
    fprintf(err, "aenv-xattr: %s: %s\n", path, strerror(errno));
    return 1;
  }
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, PREFIX, strlen(PREFIX)) == 0 && lremovexattr(path, k) < 0) {
      fprintf(err, "aenv-xattr: %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  for (int i = 0; i + 1 < argc; i += 2) {
    static char key[300], name[320], value[65536];
    size_t kn, vn;
    if (strlen(argv[i]) / 2 >= sizeof key || strlen(argv[i + 1]) / 2 > sizeof value || unhex(argv[i], key, &kn) < 0 ||
        unhex(argv[i + 1], value, &vn) < 0) {
      fprintf(err, "aenv-xattr: bad key or value\n");
      return 2;
    }
    key[kn] = 0;
    snprintf(name, sizeof name, "%s%s", PREFIX, key);
    if (lsetxattr(path, name, value, vn, 0) < 0) {
      fprintf(err, "aenv-xattr: %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  return 0;
}

static int call(int argc, char **argv, FILE *out, FILE *err) {
  if (argc >= 3 && strcmp(argv[1], "get") == 0) {
    for (int i = 2; i < argc; i++) get(out, i - 2, argv[i]);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "set") == 0 && (argc - 3) % 2 == 0) return set(err, argv[2], argc - 3, argv + 3);
  fprintf(err, "usage: aenv-xattr get PATH... | set PATH [KEYHEX VALUEHEX]... | serve\n");
  return 2;
}

static int read_full(int fd, void *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  for (size_t put = 0; put < n;) {
    ssize_t w = write(fd, (const char *)buf + put, n - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    put += (size_t)w;
  }
  return 0;
}

static int serve(void) {
  for (;;) {
    unsigned char len[4];
    if (read_full(0, len, 4) < 0) return 0; /* envd is gone */
    uint32_t n = (uint32_t)len[0] | (uint32_t)len[1] << 8 | (uint32_t)len[2] << 16 | (uint32_t)len[3] << 24;
    if (n == 0 || n > MAX_REQUEST) return 2;
    char *req = malloc(n);
    if (!req || read_full(0, req, n) < 0 || req[n - 1] != 0) return 2;
    int argc = 1;
    for (uint32_t i = 0; i < n; i++) argc += req[i] == 0;
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    if (!argv) return 2;
    argv[0] = "aenv-xattr";
    for (uint32_t i = 0, a = 1; i < n; a++) {
      argv[a] = req + i;
      i += (uint32_t)strlen(req + i) + 1;
    }
    char *outp = NULL, *errp = NULL;
    size_t outn = 0, errn = 0;
    FILE *out = open_memstream(&outp, &outn), *err = open_memstream(&errp, &errn);
    if (!out || !err) return 2;
    int rc = call(argc, argv, out, err);
    fclose(out);
    fclose(err);
    const char *body = rc == 0 ? outp : errp;
    size_t bn = rc == 0 ? outn : errn;
    uint32_t total = (uint32_t)bn + 1;
    unsigned char head[5] = {total & 0xff, (total >> 8) & 0xff, (total >> 16) & 0xff, total >> 24, (unsigned char)rc};
    int bad = write_full(1, head, sizeof head) < 0 || write_full(1, body, bn) < 0;
    free(outp);
    free(errp);
    free(argv);
    free(req);
    if (bad) return 0;
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "serve") == 0) return serve();
  return call(argc, argv, stdout, stderr);
}
