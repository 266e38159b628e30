/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_ops_process.h: Data movement: shape changes, gathers, slices, resizes. */

#ifndef _ODLA_OPERATOR_OPS_PROCESS_H_
#define _ODLA_OPERATOR_OPS_PROCESS_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ODLA_NEAREST,
  ODLA_LINEAR,
  ODLA_CUBIC,
} odla_interpolation_mode;

typedef enum {
  ODLA_ASSYMMETRIC,
  ODLA_HALF_PIXEL,
  ODLA_HALF_PIXEL_TF,
  ODLA_ALIGN_CORNERS,
} odla_resize_coordinate_mode;

typedef enum {
  ODLA_EyeLike,
  ODLA_RandomNormal,
  ODLA_RandomUniform,
} odla_fill_method;

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Broadcast(const odla_value input, odla_value_shape output_shape,
               const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Cast(odla_value input, odla_element_type target_type,
          const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Compress(odla_value input, odla_value condition, odla_int32 axis,
              odla_value_shape max_output_shape, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Concat(odla_values inputs, odla_int32 axis, odla_value_shape output_shape,
            const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_ExpandDims(odla_value input, odla_value_shape output_dims,
                const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Fill(odla_value_type type, odla_fill_method method, odla_float32 p0,
          odla_float32 p1, odla_float32 seed, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Gather(odla_value input, odla_value indices, odla_int32 axis,
            odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_GatherND(odla_value input, odla_value indices, odla_int32 num_batch_dims,
              odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_GatherElements(odla_value input, odla_value indices, odla_int32 axis,
                    odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_OneHot(
    odla_value indices, odla_int32 depth, odla_value values, odla_int32 axis,
    odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Pad(odla_value input, const odla_uint32* padding_front,
         const odla_uint32* padding_back, odla_value_shape output_dims,
         const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Reshape(odla_value input, odla_value_shape output_dims,
             const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_ReshapeDynamic(
    odla_value input, odla_value output_shape, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Resize(odla_value input, odla_interpolation_mode interpolation,
            odla_resize_coordinate_mode mode, odla_uint32 axes_mask,
            odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_ResizeDynamic(
    odla_value input, odla_value scales, odla_value sizes,
    odla_interpolation_mode interpolation, odla_resize_coordinate_mode mode,
    odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Shape(odla_value input, odla_value_shape output_dims,
           const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Slice(odla_value input, const odla_int32* start, const odla_int32* end,
           const odla_int32* stride, odla_value_shape output_dims,
           const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_DimsExpand(odla_value input, odla_value original, odla_value axes,
                odla_value_shape output_dims, const odla_value_id id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL odla_SliceDynamic(
    odla_value input, odla_value start, odla_value size, odla_value stride,
    odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_values ODLA_API_CALL
odla_Split(odla_value input, odla_value split_dim, odla_int32 num_split,
           const odla_value_ids value_ids);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Squeeze(odla_value input, odla_size_t num_of_axes, const odla_uint32* axes,
             odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Stack(odla_values inputs, odla_int32 axis, odla_value_shape output_shape,
           const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Transpose(odla_value input, odla_value_shape permutations,
               odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_Tile(odla_value input, const odla_uint32* repeat,
          odla_value_shape output_dims, const odla_value_id value_id);

extern ODLA_API_EXPORT odla_value ODLA_API_CALL
odla_TileDynamic(odla_value input, odla_value repeat,
                 odla_value_shape output_dims, const odla_value_id value_id);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
