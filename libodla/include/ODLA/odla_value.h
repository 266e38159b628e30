/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_value.h: Values: types, shapes, ids, data. */

#ifndef _ODLA_VALUE_H_
#define _ODLA_VALUE_H_

#include <ODLA/odla_common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ODLA_MAX_DIMENSION 10

#define ODLA_MAX_OUTPUTS 64

typedef struct {
  odla_element_type data_type;
  union {
    odla_int32 val_int32;
    odla_uint32 val_uint32;
    odla_int64 val_int64;
    odla_uint64 val_uint64;
    odla_float32 val_fp32;
    odla_float64 val_fp64;
    odla_string val_str;
  };
} odla_scalar_value;

typedef struct {

  odla_int32 size;

  odla_int64 dims[ODLA_MAX_DIMENSION];
} odla_value_shape;

typedef struct {
  odla_element_type element_type;
  odla_value_shape shape;
} odla_value_type;

typedef struct _odla_value* odla_value;

typedef struct {
  odla_size_t size;
  odla_value values[ODLA_MAX_OUTPUTS];
} odla_values;

typedef struct _odla_value_id* odla_value_id;

typedef struct {
  odla_size_t size;
  odla_value_id value_ids[ODLA_MAX_OUTPUTS];
} odla_value_ids;

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_SetValueData(odla_value value, const odla_void* data_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_SetValueDataById(const odla_value_id value_id, const odla_void* data_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetRawDataPtr(const odla_value value, odla_void** data_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetValueDataById(const odla_value_id value_id, odla_void* data_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetValueType(const odla_value value, odla_value_type* value_type);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_GetValueTypeById(
    const odla_value_id value_id, odla_value_type* value_type);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetValueId(const odla_value value, odla_value_id* value_id);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_FindValueById(const odla_value_id value_id, odla_value* value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_SetValueAsOutput(odla_value value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_SetValuesAsOutput(odla_values values);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_SetValueAsOutputById(const odla_value_id value_id);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_ReleaseValue(odla_value value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_ReleaseValueById(odla_value_id value_id);

extern ODLA_API_EXPORT void ODLA_API_CALL odla_Dump(odla_value value);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
