// The element-type table (see dtypes.h).
#include "dtypes.h"

#include <string>

#include "internal.h"

namespace odla_tvm {

namespace {

// In ODLA's order (odla_element_type's values): quantized types are stored as plain ones.
const Dtype kDtypes[] = {
    {ODLA_INT8, "INT8", {kDLInt, 8, 1}, "|i1", "int8"},
    {ODLA_INT16, "INT16", {kDLInt, 16, 1}, "<i2", "int16"},
    {ODLA_INT32, "INT32", {kDLInt, 32, 1}, "<i4", "int32"},
    {ODLA_INT64, "INT64", {kDLInt, 64, 1}, "<i8", "int64"},
    {ODLA_UINT8, "UINT8", {kDLUInt, 8, 1}, "|u1", "uint8"},
    {ODLA_UINT16, "UINT16", {kDLUInt, 16, 1}, "<u2", "uint16"},
    {ODLA_UINT32, "UINT32", {kDLUInt, 32, 1}, "<u4", "uint32"},
    {ODLA_UINT64, "UINT64", {kDLUInt, 64, 1}, "<u8", "uint64"},
    {ODLA_QINT8, "QINT8", {kDLInt, 8, 1}, "|i1", "int8"},
    {ODLA_QINT16, "QINT16", {kDLInt, 16, 1}, "<i2", "int16"},
    {ODLA_QINT32, "QINT32", {kDLInt, 32, 1}, "<i4", "int32"},
    {ODLA_QINT64, "QINT64", {kDLInt, 64, 1}, "<i8", "int64"},
    {ODLA_QUINT8, "QUINT8", {kDLUInt, 8, 1}, "|u1", "uint8"},
    {ODLA_QUINT16, "QUINT16", {kDLUInt, 16, 1}, "<u2", "uint16"},
    {ODLA_QUINT32, "QUINT32", {kDLUInt, 32, 1}, "<u4", "uint32"},
    {ODLA_QUINT64, "QUINT64", {kDLUInt, 64, 1}, "<u8", "uint64"},
    {ODLA_FLOAT16, "FLOAT16", {kDLFloat, 16, 1}, "<f2", "float16"},
    {ODLA_BFLOAT16, "BFLOAT16", {kDLBfloat, 16, 1}, "<V2", "bfloat16"},  // ml_dtypes' np.save
    {ODLA_FLOAT32, "FLOAT32", {kDLFloat, 32, 1}, "<f4", "float32"},
    {ODLA_FLOAT64, "FLOAT64", {kDLFloat, 64, 1}, "<f8", "float64"},
    {ODLA_BOOL, "BOOL", {kDLBool, 8, 1}, "|b1", "bool"},
};

template <typename Match>
const Dtype* Find(Match match) {
  for (const Dtype& d : kDtypes)
    if (match(d)) return &d;
  return nullptr;
}

}  // namespace

const Dtype* DtypeOfElement(odla_element_type element) {
  return Find([&](const Dtype& d) { return d.element == element; });
}

const Dtype* DtypeOfOdlaName(std::string_view name) {
  return Find([&](const Dtype& d) { return name == d.odla; });
}

const Dtype* DtypeOfNumpyName(std::string_view name) {
  return Find([&](const Dtype& d) { return name == d.numpy; });
}

const Dtype* DtypeOfDescr(std::string_view descr) {
  // '<' little-endian, '=' native (little-endian here), '|' no order (a byte, a void)
  if (descr.size() < 2 || (descr[0] != '<' && descr[0] != '=' && descr[0] != '|')) return nullptr;
  return Find([&](const Dtype& d) {
    return descr.substr(1) == std::string_view(d.npy).substr(1) &&
           (descr[0] != '|' || d.dl.bits == 8 || d.dl.code == kDLBfloat);
  });
}

const Dtype* DtypeOfDL(DLDataType dl) {
  return Find([&](const Dtype& d) { return SameDL(d.dl, dl); });
}

DLDataType DataType(odla_element_type type) {
  const Dtype* dtype = DtypeOfElement(type);
  if (dtype == nullptr)
    throw Error(ODLA_UNSUPPORTED_DATATYPE, "element type " + std::to_string(type) +
                                               " has no tensor form");
  return dtype->dl;
}

}  // namespace odla_tvm
