/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops_training.h: Training ops (none in ODLA 0.5). */

#ifndef _ODLA_OPERATOR_OPS_TRAINING_H_
#define _ODLA_OPERATOR_OPS_TRAINING_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
