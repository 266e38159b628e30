/* The C interface libodla_tvm.so calls in libodla_tvm_compiler.so, the build library it
 * dlopen()s when a computation is first built: calls of odla_tvm's Python API through an
 * embedded (or the host process's) interpreter. Objects are owned Python references. */
#ifndef ODLA_TVM_COMPILER_API_H_
#define ODLA_TVM_COMPILER_API_H_

#include <ODLA/odla.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void* odla_tvm_object;

typedef enum {
  ODLA_TVM_ARG_NONE,
  ODLA_TVM_ARG_OBJECT,  /* object */
  ODLA_TVM_ARG_OBJECTS, /* objects[count] (a list; NULL entries are None) */
  ODLA_TVM_ARG_INT,     /* integer */
  ODLA_TVM_ARG_FLOAT,   /* real */
  ODLA_TVM_ARG_STRING,  /* text */
  ODLA_TVM_ARG_STRINGS, /* texts[count] (NULL entries are None) */
  ODLA_TVM_ARG_INTS,    /* ints[count] (a tuple) */
  ODLA_TVM_ARG_TYPE,    /* type: an odla_tvm.ValueType */
  ODLA_TVM_ARG_DATA     /* data of `type`: a NumPy array, copied */
} odla_tvm_arg_kind;

typedef struct {
  odla_tvm_arg_kind kind;
  odla_int64 integer;
  double real;
  const char* text;
  const odla_tvm_object* objects;
  const char* const* texts;
  const odla_int64* ints;
  const void* data;
  odla_size_t count;
  odla_value_type type;
} odla_tvm_arg;

typedef struct {
  /* odla_tvm.<function>(*args) with `computation` (if not NULL) made current: a list or
   * tuple result gives one object each (at most ODLA_MAX_OUTPUTS), None none, another one. */
  odla_status (*call)(const char* function, odla_tvm_object computation,
                      const odla_tvm_arg* args, odla_size_t count,
                      odla_tvm_object* results, odla_size_t* result_count);
  /* odla_tvm.<function>(computation) where it gives an integer. */
  odla_status (*integer)(const char* function, odla_tvm_object computation, odla_int64* result);
  /* A Value's id (valid while the object lives) and type. */
  odla_status (*describe)(odla_tvm_object value, const char** id, odla_value_type* type);
  /* compile_computation then store_executable(None): the stored executable's bytes, which
   * the caller frees with free_bytes. */
  odla_status (*compile)(odla_tvm_object computation, char** bytes, odla_size_t* size);
  void (*free_bytes)(char* bytes);
  /* get_value_data(value) copied to `data` (`size` bytes). */
  odla_status (*read_data)(odla_tvm_object value, void* data, odla_size_t size);
  void (*release)(odla_tvm_object object);
  /* The message of this thread's last failure. */
  const char* (*last_error)(void);
} odla_tvm_compiler_api;

/* The one symbol libodla_tvm.so looks up. */
const odla_tvm_compiler_api* odla_tvm_compiler(void);

#ifdef __cplusplus
}
#endif

#endif /* ODLA_TVM_COMPILER_API_H_ */
