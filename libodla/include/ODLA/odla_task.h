/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_task.h: Tasks run on a device, synchronously or not. */

#ifndef _ODLA_TASK_H_
#define _ODLA_TASK_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_device.h>
#include <ODLA/odla_value.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  void (*func)(odla_device, odla_values inputs, odla_values outputs);
  odla_values inputs;
  odla_values outputs;
} odla_task;

typedef odla_status (*odla_async_executor)(odla_status (*)(odla_device,
                                                           odla_task),
                                           odla_device, odla_task);

odla_status odla_SetAsyncExecutor(odla_async_executor executor);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_RunTask(odla_device device, odla_task task);

extern ODLA_API_EXPORT odla_status ODLA_API_CALL
odla_RunTaskAsync(odla_device device, odla_task task);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
