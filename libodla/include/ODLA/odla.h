/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla.h: The whole ODLA 0.5 C API: includes every other header. */

#ifndef _ODLA_H_
#define _ODLA_H_

#include <ODLA/odla_common.h>
#include <ODLA/odla_compute.h>
#include <ODLA/odla_device.h>
#include <ODLA/odla_log.h>
#include <ODLA/odla_memory.h>
#include <ODLA/odla_ops.h>
#include <ODLA/odla_profiler.h>
#include <ODLA/odla_task.h>
#include <ODLA/odla_value.h>
#include <ODLA/odla_version.h>


#endif
