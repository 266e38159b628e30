/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops_custom.h: Custom (vendor or user) ops. */

#ifndef _ODLA_OPERATOR_OPS_CUSTOM_H_
#define _ODLA_OPERATOR_OPS_CUSTOM_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

extern ODLA_API_EXPORT odla_values ODLA_API_CALL
odla_CustomOp(odla_values inputs, const odla_char* op_name,
              const odla_char* function_name, const odla_value_ids ids, ...);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
