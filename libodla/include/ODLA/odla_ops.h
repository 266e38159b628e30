/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops.h: Every op group. */

#ifndef _ODLA_OPS_H_
#define _ODLA_OPS_H_

#include <ODLA/ops/odla_ops_basic.h>
#include <ODLA/ops/odla_ops_control_flow.h>
#include <ODLA/ops/odla_ops_custom.h>
#include <ODLA/ops/odla_ops_math.h>
#include <ODLA/ops/odla_ops_nn.h>
#include <ODLA/ops/odla_ops_process.h>
#include <ODLA/ops/odla_ops_quantization.h>
#include <ODLA/ops/odla_ops_training.h>


#endif
