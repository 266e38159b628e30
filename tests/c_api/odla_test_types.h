// What the suite's C++ ODLA programs share: ids from C strings, value types from dims.
#pragma once

#include <ODLA/odla.h>

#include <initializer_list>

#define ID(text) ((odla_value_id)(text))

inline odla_value_type Type(odla_element_type element, std::initializer_list<odla_int64> dims) {
  odla_value_type type{};
  type.element_type = element;
  type.shape.size = static_cast<odla_int32>(dims.size());
  int i = 0;
  for (odla_int64 d : dims) type.shape.dims[i++] = d;
  return type;
}
