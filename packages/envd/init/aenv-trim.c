/*
 * aenv-trim.node: a Node-API module with one function, trim(), that gives envd's free glibc
 * heap back to the kernel (malloc_trim). Called at /quiesce, right before a checkpoint: a
 * sandbox that moved files through envd keeps ~16 MiB of freed but untrimmed heap, which
 * every later pause image, snapshot and fork child would otherwise carry.
 */
#include <malloc.h>
#include <node_api.h>

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  napi_get_boolean(env, malloc_trim(0) == 1, &out);
  return out;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "trim", NAPI_AUTO_LENGTH, trim, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trim", fn) != napi_ok) return NULL;
  return exports;
}
