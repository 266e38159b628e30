/* ODLA 0.5's ABI, checked at compile time (as C99..C17 and C++11..C++20): the struct layouts
 * and enum values of the public headers on LP64. Builds with -Wall -Wextra -Werror. */
#include <ODLA/odla.h>
#include <stddef.h>
#include <stdio.h>

#define CHECK(name, condition) typedef char name[(condition) ? 1 : -1]

CHECK(shape_size, sizeof(odla_value_shape) == 88);
CHECK(shape_dims, offsetof(odla_value_shape, dims) == 8);
CHECK(type_size, sizeof(odla_value_type) == 96);
CHECK(type_shape, offsetof(odla_value_type, shape) == 8);
CHECK(values_size, sizeof(odla_values) == 520);
CHECK(values_array, offsetof(odla_values, values) == 8);
CHECK(ids_size, sizeof(odla_value_ids) == 520);
CHECK(scalar_size, sizeof(odla_scalar_value) == 16);
CHECK(location_size, sizeof(odla_resource_location) == 24);
CHECK(location_size_field, offsetof(odla_resource_location, size) == 16);
CHECK(task_size, sizeof(odla_task) == 1048);
CHECK(quant_info_size, sizeof(odla_value_quant_info) == 32);
CHECK(id_is_pointer, sizeof(odla_value_id) == sizeof(void*));
CHECK(bool_size, sizeof(odla_bool) == 4);
CHECK(max_dimension, ODLA_MAX_DIMENSION == 10);
CHECK(max_outputs, ODLA_MAX_OUTPUTS == 64);
CHECK(version, ODLA_VERSION_NUMBER == 50);
CHECK(float32, ODLA_FLOAT32 == 18);
CHECK(bool_type, ODLA_BOOL == 20);
CHECK(string_type, ODLA_STRING == 21);
CHECK(unsupported_op, ODLA_UNSUPPORTED_OP == 7);
CHECK(failure, ODLA_FAILURE == 14);
CHECK(cache_dir, ODLA_CACHE_DIR == 25);
CHECK(callback_arg, ODLA_ASYNC_CALLBACK_ARG == 27);
CHECK(training, ODLA_COMPUTE_TRAINING == 2);
CHECK(bf16_auto, BF16_AUTO_MODE == 3);
CHECK(location_uri, ODLA_LOCATION_URI == 2);
CHECK(vendor_qualcomm, ODLA_VENDOR_QUALCOMM == 8);
CHECK(feature_set, OVI_FEATURE_SET == 1);
CHECK(device_aic100, ODLA_DEVICE_QUALCOMM_AIC100 == 12);
CHECK(info_sdk, ODLA_DEVICE_INFO_SDK_VERSION == 12);
CHECK(log_trace, ODLA_LOG_LEVEL_TRACE == 6);
CHECK(memcpy_d2d, ODLA_MEMCPY_D2D == 3);
CHECK(layout_ios, ODLA_IOS == 5);
CHECK(rnn_direction, ODLA_RNN_BIDIRECTIONAL == 2);
CHECK(rnn_outputs, ODLA_RNN_HIDDEN_CELL_STATE == 3);
CHECK(reduce_sum, ODLA_REDUCE_SUM == 2);
CHECK(rnn_weights, ODLA_RNN_LDIGO == 1);
CHECK(gate_order, ODLA_RNN_URO == 4);
CHECK(tfidf, ODLA_TFIDF_TFIDF == 2);
CHECK(interpolation, ODLA_CUBIC == 2);
CHECK(coordinates, ODLA_ALIGN_CORNERS == 3);
CHECK(fill, ODLA_RandomUniform == 2);
CHECK(loop_mode, ODLA_LOOP_REV_AFTER == 4);

int main(void) {
  printf("layout ok\n");
  return 0;
}
