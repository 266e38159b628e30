/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops_quantization.h: Quantize and dequantize. */

#ifndef _ODLA_OPERATOR_OPS_QUANTIZATION_H_
#define _ODLA_OPERATOR_OPS_QUANTIZATION_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {

  odla_value_id value_id;
  int ch_idx;
  odla_float32 scale;
  odla_float32 offset;
  odla_float32 min;
  odla_float32 max;
} odla_value_quant_info;

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_Dequantize(
    odla_value input, odla_value scale, odla_value zero_point, odla_int32 axis,
    odla_element_type target_data_type, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_Quantize(
    odla_value input, odla_value scale, odla_value zero_point, odla_int32 axis,
    odla_element_type target_data_type, const odla_value_id value_id);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
