// Building a computation through the build library: the arguments of odla_tvm's Python op
// functions made from ODLA's C arguments, and the values they return made into handles.
#ifndef ODLA_TVM_BUILD_H_
#define ODLA_TVM_BUILD_H_

#include <initializer_list>

#include "internal.h"

namespace odla_tvm {

struct Arg : odla_tvm_arg {
  Arg() : odla_tvm_arg{} { kind = ODLA_TVM_ARG_NONE; }
  odla_tvm_object object = nullptr;  // ODLA_TVM_ARG_OBJECT's one object
  std::vector<odla_tvm_object> objects_held;
  std::vector<const char*> texts_held;
  std::vector<odla_int64> ints_held;
};

Arg None();
Arg V(odla_value value);                   // a Value, or None for NULL
Arg Vs(const odla_values& values);         // a list of Values
Arg I(int64_t integer);
Arg F(double real);
Arg S(const char* text);                   // a str, or None for NULL
Arg Id(odla_value_id id);                  // an id, or None for NULL (one is made up)
Arg Ids(const odla_value_ids& ids);        // a list of ids
Arg Dims(const odla_value_shape& shape);   // a shape the op needs (checked)
Arg Hint(const odla_value_shape& shape);   // output_dims where only a hint: None
Arg Type(const odla_value_type& type);     // a ValueType (checked)
Arg Data(const odla_value_type& type, const void* data);  // a NumPy copy of `data`

template <typename T>
Arg Ints(const T* values, size_t count) {  // a tuple, or None for NULL
  if (values == nullptr) return None();
  Arg a;
  a.kind = ODLA_TVM_ARG_INTS;
  a.ints_held.assign(values, values + count);
  return a;
}

int Rank(odla_value value, const char* what);  // the rank of a built value
size_t Count(size_t count, const char* what);  // an array length, at most ODLA_MAX_DIMENSION

// odla_tvm.<function>(*args) in the current computation: its one Value, or its Values.
odla_value Op(const char* function, std::initializer_list<Arg> args);
odla_values Ops(const char* function, std::initializer_list<Arg> args);
// The same in `computation` (NULL: none made current), giving the Values' handles: those
// the computation has already for Values it returned before.
std::vector<odla_value> Values(_odla_computation* computation, const char* function,
                               std::initializer_list<Arg> args);
void Do(_odla_computation* computation, const char* function, std::initializer_list<Arg> args);
Arg Self(_odla_computation* computation);  // the computation itself, as an argument
// odla_tvm.<function>(computation), an integer.
int64_t Integer(_odla_computation* computation, const char* function);

}  // namespace odla_tvm

// Op entry points: `body` an expression giving the odla_value(s), any throw a NULL result.
#define ODLA_OP(body) return odla_tvm::GuardValue<odla_value>(__func__, [&] { return body; })
#define ODLA_OPS(body) return odla_tvm::GuardValue<odla_values>(__func__, [&] { return body; })

#endif  // ODLA_TVM_BUILD_H_
