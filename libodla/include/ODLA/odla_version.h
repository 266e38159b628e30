/* odla-tvm: ODLA 0.5 C API, ABI-compatible with the public ODLA headers.
 * odla_version.h: The API version. */

#ifndef _ODLA_VERSION_H_
#define _ODLA_VERSION_H_

#ifdef __cplusplus
extern "C" {
#endif

#define ODLA_MAJOR 0
#define ODLA_MINOR 5
#define ODLA_PATCH 0

#define ODLA_VERSION_NUMBER ((ODLA_MAJOR)*100 + (ODLA_MINOR)*10 + (ODLA_PATCH))

const char* odla_GetVersionString(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif
