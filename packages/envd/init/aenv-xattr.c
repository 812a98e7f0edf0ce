/*
 * aenv-xattr: envd's access to the `user.e2b.*` extended attributes that hold E2B file
 * metadata (Node has no xattr API). Symlinks are not followed. Keys and values travel in
 * hex, so any bytes pass.
 *   aenv-xattr get PATH...            one line per attribute: INDEX TAB KEYHEX TAB VALUEHEX
 *                                     (INDEX = position of PATH; unreadable paths are skipped)
 *   aenv-xattr set PATH [KEYHEX VALUEHEX]...   replaces every user.e2b.* attribute of PATH
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#define PREFIX "user.e2b."

static void hex_out(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)s[i]);
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

static int get(int index, const char *path) {
  static char names[65536], value[65536];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n < 0) return 0;
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, PREFIX, strlen(PREFIX)) != 0) continue;
    ssize_t v = lgetxattr(path, k, value, sizeof value);
    if (v < 0) continue;
    const char *key = k + strlen(PREFIX);
    printf("%d\t", index);
    hex_out(key, strlen(key));
    putchar('\t');
    hex_out(value, (size_t)v);
    putchar('\n');
  }
  return 0;
}

static int set(const char *path, int argc, char **argv) {
  static char names[65536];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n < 0) {
    fprintf(stderr, "aenv-xattr: %s: %s\n", path, strerror(errno));
    return 1;
  }
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, PREFIX, strlen(PREFIX)) == 0 && lremovexattr(path, k) < 0) {
      fprintf(stderr, "aenv-xattr: %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  for (int i = 0; i + 1 < argc; i += 2) {
    static char key[300], name[320], value[65536];
    size_t kn, vn;
    if (strlen(argv[i]) / 2 >= sizeof key || strlen(argv[i + 1]) / 2 > sizeof value || unhex(argv[i], key, &kn) < 0 ||
        unhex(argv[i + 1], value, &vn) < 0) {
      fprintf(stderr, "aenv-xattr: bad key or value\n");
      return 2;
    }
    key[kn] = 0;
    snprintf(name, sizeof name, "%s%s", PREFIX, key);
    if (lsetxattr(path, name, value, vn, 0) < 0) {
      fprintf(stderr, "aenv-xattr: %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "get") == 0) {
    for (int i = 2; i < argc; i++) get(i - 2, argv[i]);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "set") == 0 && (argc - 3) % 2 == 0) return set(argv[2], argc - 3, argv + 3);
  fprintf(stderr, "usage: aenv-xattr get PATH... | set PATH [KEYHEX VALUEHEX]...\n");
  return 2;
}
