/*
 * aenv-trim.node: a Node-API module with one function, trim(), that gives envd's free glibc
 * heap back to the kernel (malloc_trim). Called at /quiesce, right before a checkpoint: a
 * sandbox that moved files through envd keeps ~16 MiB of freed but untrimmed heap, which
 * every later pause image, snapshot and fork child would otherwise carry.
 *
 * discard(buffer) drops the whole pages inside a scratch Buffer (MADV_DONTNEED: they read as
 * zeros and take no memory until written again): envd's socket read buffer, whose content
 * means nothing between reads, would otherwise be saved in every image once a large upload
 * had filled it.
 */
#include <malloc.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  napi_get_boolean(env, malloc_trim(0) == 1, &out);
  return out;
}

static napi_value discard(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  void *data = NULL;
  size_t len = 0;
  bool ok = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc == 1 &&
      napi_get_buffer_info(env, argv[0], &data, &len) == napi_ok && data != NULL) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)data + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)data + len) & ~(page - 1);
    ok = end <= start || madvise((void *)start, end - start, MADV_DONTNEED) == 0;
  }
  napi_value out;
  napi_get_boolean(env, ok, &out);
  return out;
}

static bool export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn) == napi_ok &&
         napi_set_named_property(env, exports, name, fn) == napi_ok;
}

NAPI_MODULE_INIT() {
  if (!export_fn(env, exports, "trim", trim) || !export_fn(env, exports, "discard", discard)) return NULL;
  return exports;
}
