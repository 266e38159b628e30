/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops_basic.h: Basic ops: arguments, constants, values, variables, clones. */

#ifndef _ODLA_OPERATOR_OPS_BASIC_H_
#define _ODLA_OPERATOR_OPS_BASIC_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_CreateArgument(
    const odla_value_type value_type, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_CreateValue(
    const odla_value_type value_type, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_CreateConstant(const odla_value_type value_type, const odla_void* data_ptr,
                    const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_CloneValue(const odla_value src_value, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_CloneValueById(
    const odla_value_id src_value_id, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_CreateVariable(
    const odla_value_type value_type, const odla_value_id value_id);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
