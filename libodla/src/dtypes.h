// The one table of element types: ODLA's, their tensor form (DLPack) and their .npy and NumPy
// names, read by the stored-executable reader, the run path and odla_runner.
#ifndef ODLA_TVM_DTYPES_H_
#define ODLA_TVM_DTYPES_H_

#include <ODLA/odla.h>
#include <dlpack/dlpack.h>

#include <string_view>

namespace odla_tvm {

struct Dtype {
  odla_element_type element;
  const char* odla;   // its name in a manifest's "element_type"
  DLDataType dl;
  const char* npy;    // .npy descr, little-endian
  const char* numpy;  // NumPy's name (a manifest's weight "dtype")
};

// NULL where none matches (STRING has no tensor form).
const Dtype* DtypeOfElement(odla_element_type element);
const Dtype* DtypeOfOdlaName(std::string_view name);
const Dtype* DtypeOfNumpyName(std::string_view name);
const Dtype* DtypeOfDescr(std::string_view descr);
const Dtype* DtypeOfDL(DLDataType dl);  // the plain (not quantized) type of that form

// `type`'s tensor form; throws Error(ODLA_UNSUPPORTED_DATATYPE) where it has none.
DLDataType DataType(odla_element_type type);

inline bool SameDL(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace odla_tvm

#endif  // ODLA_TVM_DTYPES_H_
