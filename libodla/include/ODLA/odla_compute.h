/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_compute.h: Computations, executables, contexts: building, compiling, binding, running. */

#ifndef _ODLA_COMPUTE_H_
#define _ODLA_COMPUTE_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_device.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ODLA_COMPUTE_DEFAULT,
  ODLA_COMPUTE_INFERENCE,
  ODLA_COMPUTE_TRAINING,
} odla_compute_mode;

typedef enum {
  ODLA_DYNAMIC_BATCH,
  ODLA_MIN_BATCH_SIZE,
  ODLA_MAX_BATCH_SIZE,
  ODLA_OPT_BATCH_SIZE,
  ODLA_RUN_BATCH_SIZE,
  ODLA_DYNAMIC_SHAPE,
  ODLA_MIN_SHAPE,
  ODLA_MAX_SHAPE,
  ODLA_OPT_SHAPE,
  ODLA_DYNAMIC_VALUE,
  ODLA_MIN_VALUE,
  ODLA_MAX_VALUE,
  ODLA_OPT_VALUE,
  ODLA_BF16_MODE,
  ODLA_FP16_MODE,
  ODLA_USE_SIM_MODE,
  ODLA_PROCESSOR_NUM,
  ODLA_BATCHES_PER_STEP,
  ODLA_USE_DATA_TYPE,
  ODLA_LOAD_ENGINE_MODE,
  ODLA_USE_DLA_CORE,
  ODLA_QUANT_TABLE,
  ODLA_QUANT_TABLE_SIZE,
  ODLA_AGGREGATE_OPS,
  ODLA_ENABLE_ENGINE_CACHE,
  ODLA_CACHE_DIR,
  ODLA_ASYNC_CALLBACK_FUNC,
  ODLA_ASYNC_CALLBACK_ARG,
} odla_item_type;

typedef enum {
  BF16_DISABLE,
  BF16_ACCURACY_MODE,
  BF16_PERFORMACE_MODE,
  BF16_AUTO_MODE,
} odla_bf16_mode;

typedef enum {
  ODLA_LOCATION_PATH,
  ODLA_LOCATION_MEMORY,
  ODLA_LOCATION_URI,
} odla_resource_location_type;

typedef struct {
  odla_resource_location_type location_type;
  const void* location;
  odla_size_t size;
} odla_resource_location;

typedef struct _odla_computation* odla_computation;

typedef struct _odla_executable* odla_executable;

typedef struct _odla_context* odla_context;

typedef struct _odla_item_value* odla_item_value;

typedef struct _odla_constants_array* odla_constants_array;

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_CreateComputation(odla_computation* computation);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_CompileComputation(const odla_computation computation,
                        const odla_device device, odla_executable* executable);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_LoadComputation(
    odla_resource_location location, odla_computation* computation);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_StoreComputation(
    odla_resource_location location, odla_computation computation);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_DifferentiateComputation(odla_computation computation);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_ExecuteComputation(
    const odla_computation computation, const odla_context context,
    const odla_compute_mode mode, odla_device device);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_AsyncExecuteComputation(
    const odla_computation computation, const odla_context context,
    const odla_compute_mode mode, odla_device device);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetNumOfArgsFromComputation(const odla_computation computation,
                                 odla_uint32* num_args);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetArgFromComputationByIdx(const odla_computation computation,
                                const odla_uint32 arg_idx,
                                odla_value* arg_value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetNumOfOutputsFromComputation(const odla_computation computation,
                                    odla_uint32* num_outputs);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetOutputFromComputationByIdx(const odla_computation computation,
                                   const odla_uint32 output_idx,
                                   odla_value* output_value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_DestroyComputation(odla_computation computation);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_SetComputationItem(
    odla_computation computation, odla_item_type type, odla_item_value value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_SetValueShapeInfo(
    odla_value value, odla_item_type type, odla_value_shape value_shape);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_SetInputValueInfo(
    odla_value value, odla_item_type type, odla_item_value value_input);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_SetRuntimeShape(
    odla_context context, odla_value value, odla_value_shape value_shape);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_GetRuntimeShape(
    odla_context context, odla_value value, odla_value_shape* value_shape_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_CreateConstantsArray(odla_constants_array* constants_array);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_LoadConstantsArray(
    const odla_char* file_name, odla_constants_array* constants_array);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_StoreConstantsArray(
    const odla_char* file_name, const odla_constants_array constants_array);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_DestroyConstantsArray(odla_constants_array constants_array);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_LoadExecutable(odla_resource_location location, odla_device device,
                    odla_executable* executable);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_StoreExecutable(odla_resource_location, odla_executable executable);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_LaunchExecutable(odla_executable executable, odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_AsyncLaunchExecutable(
    const odla_executable executable,
    const odla_constants_array constants_array, const odla_context context,
    const odla_compute_mode mode, odla_device device);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetNumOfArgsFromExecutable(const odla_executable executable,
                                odla_uint32* num_args);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_GetArgFromExecutableByIdx(
    const odla_executable executable, const odla_uint32 arg_idx,
    odla_value* arg_value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetNumOfOutputsFromExecutable(const odla_executable executable,
                                   odla_uint32* num_outputs);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetOutputFromExecutableByIdx(const odla_executable executable,
                                  const odla_uint32 output_idx,
                                  odla_value* output_value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_DestroyExecutable(odla_executable executable);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_CreateContext(odla_context* context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_SetContextItem(
    odla_context context, odla_item_type type, odla_item_value value);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_DestroyContext(odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_BindToArgument(
    odla_value value, const odla_void* data_ptr, odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_BindToArgumentById(const odla_value_id value_id, const odla_void* data_ptr,
                        odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_BindValueToArgumentById(
    const odla_value_id value_id, odla_value data, odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_BindToOutput(odla_value value, odla_void* data_ptr, odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_BindToOutputById(
    const odla_value_id value_id, odla_void* data_ptr, odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_BindValueToOutputById(
    const odla_value_id value_id, odla_value data, odla_context context);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_SetRuntimeValueType(
    odla_context context, odla_value value, odla_value_type value_type);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_GetRuntimeValueType(
    odla_context context, odla_value value, odla_value_type* value_type_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_GetRuntimeNumOfOutputs(odla_context context, odla_uint32* num_output_ptr);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL odla_GetValueData(
    const odla_value value, odla_void* data_ptr, odla_context context);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
