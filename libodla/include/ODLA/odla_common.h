/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_common.h: Scalar types, element types, statuses and export macros. */

#ifndef _ODLA_COMMON_H_
#define _ODLA_COMMON_H_

#ifdef __cplusplus
extern "C" {
#endif

#if (defined(_WIN32) && defined(_MSC_VER))

typedef signed __int8 odla_int8;
typedef signed __int16 odla_int16;
typedef signed __int32 odla_int32;
typedef signed __int64 odla_int64;
typedef unsigned __int8 odla_uint8;
typedef unsigned __int16 odla_uint16;
typedef unsigned __int32 odla_uint32;
typedef unsigned __int64 odla_uint64;

typedef signed __int8 odla_qint8;
typedef signed __int16 odla_qint16;
typedef signed __int32 odla_qint32;
typedef signed __int64 odla_qint64;
typedef unsigned __int8
    odla_quint8;
typedef unsigned __int16
    odla_quint16;
typedef unsigned __int32
    odla_quint32;
typedef unsigned __int64
    odla_quint64;

typedef unsigned __int16 odla_float16;
typedef unsigned __int16 odla_bfloat16;
typedef float odla_float32;
typedef double odla_float64;
typedef const char* odla_string;

#else

typedef __INT8_TYPE__ odla_int8;
typedef __INT16_TYPE__ odla_int16;
typedef __INT32_TYPE__ odla_int32;
typedef __INT64_TYPE__ odla_int64;
typedef __UINT8_TYPE__ odla_uint8;
typedef __UINT16_TYPE__ odla_uint16;
typedef __UINT32_TYPE__ odla_uint32;
typedef __UINT64_TYPE__ odla_uint64;

typedef __INT8_TYPE__ odla_qint8;
typedef __INT16_TYPE__ odla_qint16;
typedef __INT32_TYPE__ odla_qint32;
typedef __INT64_TYPE__ odla_qint64;
typedef __UINT8_TYPE__
    odla_quint8;
typedef __UINT16_TYPE__
    odla_quint16;
typedef __UINT32_TYPE__
    odla_quint32;
typedef __UINT64_TYPE__
    odla_quint64;

typedef __UINT16_TYPE__ odla_float16;
typedef __UINT16_TYPE__ odla_bfloat16;
typedef float odla_float32;
typedef double odla_float64;
typedef const char* odla_string;
#endif

#ifndef NULL
#define NULL ((void*)0)
#endif

typedef odla_uint32 odla_bool;

typedef enum {
  ODLA_INT8,
  ODLA_INT16,
  ODLA_INT32,
  ODLA_INT64,
  ODLA_UINT8,
  ODLA_UINT16,
  ODLA_UINT32,
  ODLA_UINT64,

  ODLA_QINT8,
  ODLA_QINT16,
  ODLA_QINT32,
  ODLA_QINT64,
  ODLA_QUINT8,
  ODLA_QUINT16,
  ODLA_QUINT32,
  ODLA_QUINT64,

  ODLA_FLOAT16,
  ODLA_BFLOAT16,
  ODLA_FLOAT32,
  ODLA_FLOAT64,

  ODLA_BOOL,
  ODLA_STRING,
} odla_element_type;

typedef char odla_char;

typedef __SIZE_TYPE__ odla_size_t;

typedef void odla_void;

typedef enum {
  ODLA_SUCCESS,

  ODLA_DL_ERROR,
  ODLA_FILE_NOT_EXIST,

  ODLA_INVALID_PARAM,

  ODLA_MEM_ERROR,
  ODLA_UNSUPPORTED_DATATYPE,
  ODLA_UNSUPPORTED_DEVICE_TYPE,

  ODLA_UNSUPPORTED_OP,

  ODLA_TIMEOUT,

  ODLA_INTERNAL_LOGIC_ERR,

  ODLA_RECOVERABLE_ERR,

  ODLA_PARTITION_RESET,
  ODLA_FULL_RESET,

  ODLA_UNRECOVERABLE_ERR,
  ODLA_FAILURE,
} odla_status;

#if defined(_WIN32)
#define ODLA_API_EXPORT __declspec(dllexport)
#define ODLA_API_CALL __stdcall
#else
#define ODLA_API_EXPORT
#define ODLA_API_CALL
#endif

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
