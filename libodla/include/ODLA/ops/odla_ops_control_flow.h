/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops_control_flow.h: Control flow: loops and branches. */

#ifndef _ODLA_OPERATOR_OPS_LOOP_H_
#define _ODLA_OPERATOR_OPS_LOOP_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ODLA_LOOP_LAST_VALUE,
  ODLA_LOOP_FWD_BEFORE,
  ODLA_LOOP_FWD_AFTER,
  ODLA_LOOP_REV_BEFORE,
  ODLA_LOOP_REV_AFTER,
} odla_loop_output_mode;

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_CreateLoopVariable(odla_value init_value, odla_value_id value_id);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_BeginLoop(odla_value trip_count, odla_value_id value_id);

extern ODLA_API_EXPORT odla_values ODLA_API_CALL
odla_EndLoop(odla_value condition, odla_values output_values,
             const odla_loop_output_mode* flags, odla_value_ids);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_BeginIf(odla_value condition, odla_value_id);

extern ODLA_API_EXPORT odla_status odla_EnterBranchBody(odla_bool true_branch);

extern ODLA_API_EXPORT odla_values ODLA_API_CALL odla_EndIf(odla_value_ids);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
