// The build path's entry points: computations and values (odla_compute.h, odla_value.h,
// odla_ops_basic.h), over odla_tvm's Python API in the build library.
#include "build.h"

#include <cstdio>
#include <cstring>

#include "runtime.h"

namespace odla_tvm {

Arg None() { return Arg(); }

Arg V(odla_value value) {
  if (value != nullptr) CheckLive(value, HandleKind::kValue, "value");
  Arg a;
  a.kind = ODLA_TVM_ARG_OBJECT;
  a.object = value ? value->object : nullptr;
  if (value != nullptr && value->object == nullptr)
    throw Error(ODLA_INVALID_PARAM, "value " + value->id + " is a slot of an executable, not "
                                    "a value of a computation");
  return a;
}

Arg Vs(const odla_values& values) {
  if (values.size > ODLA_MAX_OUTPUTS)
    throw Error(ODLA_INVALID_PARAM, "odla_values.size is " + std::to_string(values.size) +
                                        "; at most ODLA_MAX_OUTPUTS");
  Arg a;
  a.kind = ODLA_TVM_ARG_OBJECTS;
  for (size_t i = 0; i < values.size; ++i) a.objects_held.push_back(V(values.values[i]).object);
  return a;
}

Arg I(int64_t integer) {
  Arg a;
  a.kind = ODLA_TVM_ARG_INT;
  a.integer = integer;
  return a;
}

Arg F(double real) {
  Arg a;
  a.kind = ODLA_TVM_ARG_FLOAT;
  a.real = real;
  return a;
}

Arg S(const char* text) {
  Arg a;
  a.kind = ODLA_TVM_ARG_STRING;
  a.text = text;
  return a;
}

Arg Id(odla_value_id id) { return S(reinterpret_cast<const char*>(id)); }

Arg Ids(const odla_value_ids& ids) {
  if (ids.size > ODLA_MAX_OUTPUTS)
    throw Error(ODLA_INVALID_PARAM, "odla_value_ids.size is " + std::to_string(ids.size) +
                                        "; at most ODLA_MAX_OUTPUTS");
  if (ids.size == 0) return None();
  Arg a;
  a.kind = ODLA_TVM_ARG_STRINGS;
  for (size_t i = 0; i < ids.size; ++i)
    a.texts_held.push_back(reinterpret_cast<const char*>(ids.value_ids[i]));
  return a;
}

Arg Dims(const odla_value_shape& shape) {
  CheckShape(shape, "the shape");
  return Ints(shape.dims, static_cast<size_t>(shape.size));
}

Arg Hint(const odla_value_shape&) { return None(); }

Arg Type(const odla_value_type& type) {
  CheckElementType(type, "the value type");
  CheckShape(type.shape, "the value type's shape");
  Arg a;
  a.kind = ODLA_TVM_ARG_TYPE;
  a.type = type;
  return a;
}

Arg Data(const odla_value_type& type, const void* data) {
  Require(data, "data_ptr");
  CheckElementType(type, "the value type");
  CheckShape(type.shape, "the value type's shape");
  ElementSize(type.element_type);  // a tensor element type, or an error
  for (int i = 0; i < type.shape.size; ++i)
    if (type.shape.dims[i] < 0)
      throw Error(ODLA_INVALID_PARAM, "data of the dynamic shape " + ShapeText(type.shape) +
                                          " has no size");
  Arg a;
  a.kind = ODLA_TVM_ARG_DATA;
  a.type = type;
  a.data = data;
  return a;
}

int Rank(odla_value value, const char* what) {
  return Live(value, HandleKind::kValue, what)->type.shape.size;
}

size_t Count(size_t count, const char* what) {
  if (count > ODLA_MAX_DIMENSION)
    throw Error(ODLA_INVALID_PARAM, std::string(what) + " is " + std::to_string(count) +
                                        "; at most ODLA_MAX_DIMENSION");
  return count;
}

namespace {

_odla_computation& Current() {
  _odla_computation* current = CurrentComputation();
  if (current == nullptr)
    throw Error(ODLA_INVALID_PARAM, "no current computation in this thread; call "
                                    "odla_CreateComputation first");
  return *current;
}

// odla_tvm.<function>(*args) in `computation`: the objects it returned, owned.
std::vector<odla_tvm_object> Objects(_odla_computation* computation, const char* function,
                                     std::initializer_list<Arg> args) {
  std::vector<odla_tvm_arg> prepared;
  for (const Arg& a : args) {  // the C structs, pointing into each Arg's own storage
    odla_tvm_arg c = a;
    c.objects = a.kind == ODLA_TVM_ARG_OBJECT ? &a.object : a.objects_held.data();
    c.texts = a.texts_held.data();
    c.ints = a.ints_held.data();
    if (a.kind == ODLA_TVM_ARG_OBJECTS) c.count = a.objects_held.size();
    if (a.kind == ODLA_TVM_ARG_STRINGS) c.count = a.texts_held.size();
    if (a.kind == ODLA_TVM_ARG_INTS) c.count = a.ints_held.size();
    prepared.push_back(c);
  }
  odla_tvm_object results[ODLA_MAX_OUTPUTS];
  odla_size_t count = 0;
  if (computation != nullptr) CheckLive(computation, HandleKind::kComputation, "computation");
  CheckCompiler(Compiler().call(function, computation ? computation->object : nullptr,
                                prepared.data(), prepared.size(), results, &count));
  return std::vector<odla_tvm_object>(results, results + count);
}

// The handle of a Value `computation` returned: the one it has, or a new one it keeps.
odla_value Handle(_odla_computation& computation, odla_tvm_object object) {
  const odla_tvm_compiler_api& compiler = Compiler();
  auto value = std::make_unique<_odla_value>();
  const char* id = nullptr;
  if (odla_status s = compiler.describe(object, &id, &value->type)) {
    compiler.release(object);
    throw Error(s, compiler.last_error());
  }
  value->id = id;
  auto known = computation.by_id.find(value->id);
  if (known != computation.by_id.end() && known->second->object == object) {
    compiler.release(object);
    return known->second;
  }
  value->object = object;
  value->computation = &computation;
  Track(value.get(), HandleKind::kValue);
  computation.by_id[value->id] = value.get();
  computation.values.push_back(std::move(value));
  computation.changed_since_compile = true;
  return computation.values.back().get();
}

}  // namespace

std::vector<odla_value> Values(_odla_computation* computation, const char* function,
                               std::initializer_list<Arg> args) {
  std::vector<odla_tvm_object> objects = Objects(computation, function, args);
  std::vector<odla_value> values;
  for (size_t i = 0; i < objects.size(); ++i) {
    try {
      values.push_back(Handle(*Require(computation, "computation"), objects[i]));
    } catch (...) {
      for (size_t j = i + 1; j < objects.size(); ++j) Compiler().release(objects[j]);
      throw;
    }
  }
  return values;
}

void Do(_odla_computation* computation, const char* function, std::initializer_list<Arg> args) {
  for (odla_tvm_object object : Objects(computation, function, args)) Compiler().release(object);
  if (computation != nullptr) computation->changed_since_compile = true;
}

Arg Self(_odla_computation* computation) {
  Arg self;
  self.kind = ODLA_TVM_ARG_OBJECT;
  self.object = Live(computation, HandleKind::kComputation, "computation")->object;
  return self;
}

int64_t Integer(_odla_computation* computation, const char* function) {
  odla_int64 result = 0;
  CheckCompiler(Compiler().integer(
      function, Live(computation, HandleKind::kComputation, "computation")->object, &result));
  return result;
}

odla_value Op(const char* function, std::initializer_list<Arg> args) {
  std::vector<odla_value> values = Values(&Current(), function, args);
  if (values.size() != 1)
    throw Error(ODLA_INTERNAL_LOGIC_ERR, std::string(function) + " gave " +
                                             std::to_string(values.size()) + " values");
  return values[0];
}

odla_values Ops(const char* function, std::initializer_list<Arg> args) {
  std::vector<odla_value> values = Values(&Current(), function, args);
  odla_values result{};
  result.size = values.size();
  std::copy(values.begin(), values.end(), result.values);
  return result;
}


std::shared_ptr<_odla_executable> Compiled(_odla_computation& computation) {
  CheckLive(&computation, HandleKind::kComputation, "computation");
  std::lock_guard<std::mutex> lock(computation.compile_mutex);
  if (computation.compiled && !computation.changed_since_compile) return computation.compiled;
  const odla_tvm_compiler_api& compiler = Compiler();
  char* bytes = nullptr;
  odla_size_t size = 0;
  CheckCompiler(compiler.compile(computation.object, &bytes, &size));
  std::string blob(bytes, size);
  compiler.free_bytes(bytes);
  computation.compiled = LoadExecutableBytes(std::move(blob), "the compiled computation");
  computation.changed_since_compile = false;
  return computation.compiled;
}

}  // namespace odla_tvm

using namespace odla_tvm;

namespace {

_odla_value* FindId(odla_value_id value_id) {
  std::string id = IdText(value_id, "value_id");
  _odla_computation& comp =
      *Live(CurrentComputation(), HandleKind::kComputation, "the current computation");
  auto found = comp.by_id.find(id);
  if (found == comp.by_id.end())
    throw Error(ODLA_INVALID_PARAM, "the current computation has no value " + id);
  return found->second;
}

_odla_value* Built(odla_value value) {
  Live(value, HandleKind::kValue, "value");
  if (value->object == nullptr)
    throw Error(ODLA_INVALID_PARAM, "value " + value->id + " is a slot of an executable");
  return value;
}

size_t DataSize(const _odla_value& value) {
  return static_cast<size_t>(ElementCount(value.type.shape)) * ElementSize(value.type.element_type);
}

void AddOutput(_odla_value* value) { Do(value->computation, "set_value_as_output", {V(value)}); }

odla_value Created(const char* function, const odla_value_type& type, odla_value_id id) {
  return Op(function, {Type(type), Id(id)});
}

}  // namespace

extern "C" {

odla_status odla_CreateComputation(odla_computation* computation) {
  return Guard(__func__, [&] {
    Require(computation, "computation");
    auto comp = std::make_unique<_odla_computation>();
    odla_tvm_object objects[ODLA_MAX_OUTPUTS];
    odla_size_t count = 0;
    const odla_tvm_compiler_api& compiler = Compiler();
    CheckCompiler(compiler.call("create_computation", nullptr, nullptr, 0, objects, &count));
    if (count != 1) throw Error(ODLA_INTERNAL_LOGIC_ERR, "create_computation gave no computation");
    comp->object = objects[0];
    Track(comp.get(), HandleKind::kComputation);
    CurrentComputation() = comp.get();
    *computation = comp.release();
    return ODLA_SUCCESS;
  });
}

// Not in ODLA 0.5's headers, but in HALO's dnnl and TensorRT platforms: makes a computation
// the calling thread's current one.
odla_status odla_SetActiveComputation(odla_computation computation) {
  return Guard(__func__, [&] {
    CurrentComputation() = Live(computation, HandleKind::kComputation, "computation");
    return ODLA_SUCCESS;
  });
}

odla_status odla_DestroyComputation(odla_computation computation) {
  return Guard(__func__, [&] {
    // only one of two destroys passes; the other (or a later one) gets a status
    if (!Untrack(Require(computation, "computation"), HandleKind::kComputation))
      ThrowNotLive("computation");
    std::unique_ptr<_odla_computation> comp(computation);
    if (CurrentComputation() == comp.get()) CurrentComputation() = nullptr;
    for (auto& value : comp->values) Untrack(value.get(), HandleKind::kValue);
    const odla_tvm_compiler_api& compiler = Compiler();
    odla_status status = Guard("odla_DestroyComputation", [&] {
      Arg self;  // the computation no longer live: not through Self
      self.kind = ODLA_TVM_ARG_OBJECT;
      self.object = comp->object;
      Do(nullptr, "destroy_computation", {self});
      return ODLA_SUCCESS;
    });
    for (auto& value : comp->values) compiler.release(value->object);
    compiler.release(comp->object);
    return status;
  });
}

odla_value odla_CreateArgument(const odla_value_type value_type, const odla_value_id value_id) {
  ODLA_OP(Created("create_argument", value_type, value_id));
}

odla_value odla_CreateValue(const odla_value_type value_type, const odla_value_id value_id) {
  ODLA_OP(Created("create_value", value_type, value_id));
}

odla_value odla_CreateVariable(const odla_value_type value_type, const odla_value_id value_id) {
  ODLA_OP(Created("create_variable", value_type, value_id));
}

odla_value odla_CreateConstant(const odla_value_type value_type, const odla_void* data_ptr,
                               const odla_value_id value_id) {
  ODLA_OP(Op("create_constant", {Type(value_type), Data(value_type, data_ptr), Id(value_id)}));
}

odla_value odla_CloneValue(const odla_value src_value, const odla_value_id value_id) {
  ODLA_OP(Op("clone_value", {V(Require(src_value, "src_value")), Id(value_id)}));
}

odla_value odla_CloneValueById(const odla_value_id src_value_id, const odla_value_id value_id) {
  ODLA_OP(Op("clone_value", {V(FindId(src_value_id)), Id(value_id)}));
}

odla_status odla_SetValueAsOutput(odla_value value) {
  return Guard(__func__, [&] {
    AddOutput(Built(value));
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetValuesAsOutput(odla_values values) {
  return Guard(__func__, [&] {
    if (values.size > ODLA_MAX_OUTPUTS) throw Error(ODLA_INVALID_PARAM, "values.size is too large");
    for (size_t i = 0; i < values.size; ++i) AddOutput(Built(values.values[i]));
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetValueAsOutputById(const odla_value_id value_id) {
  return Guard(__func__, [&] {
    AddOutput(FindId(value_id));
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetValueType(const odla_value value, odla_value_type* value_type) {
  return Guard(__func__, [&] {
    *Require(value_type, "value_type") = LiveCopy(value, "value").type;
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetValueTypeById(const odla_value_id value_id, odla_value_type* value_type) {
  return Guard(__func__, [&] {
    *Require(value_type, "value_type") = FindId(value_id)->type;
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetValueId(const odla_value value, odla_value_id* value_id) {
  return Guard(__func__, [&] {
    *Require(value_id, "value_id") =
        reinterpret_cast<odla_value_id>(const_cast<char*>(Live(value, HandleKind::kValue,
                                                               "value")->id.c_str()));
    return ODLA_SUCCESS;
  });
}

odla_status odla_FindValueById(const odla_value_id value_id, odla_value* value) {
  return Guard(__func__, [&] {
    *Require(value, "value") = FindId(value_id);
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetValueData(odla_value value, const odla_void* data_ptr) {
  return Guard(__func__, [&] {
    _odla_value* v = Built(value);
    Do(v->computation, "set_value_data", {V(v), Data(v->type, data_ptr)});
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetValueDataById(const odla_value_id value_id, const odla_void* data_ptr) {
  return odla_SetValueData(GuardValue<odla_value>(__func__, [&] { return FindId(value_id); }),
                           data_ptr);
}

odla_status odla_GetValueDataById(const odla_value_id value_id, odla_void* data_ptr) {
  return Guard(__func__, [&] {
    _odla_value* v = FindId(value_id);
    CheckCompiler(Compiler().read_data(v->object, Require(data_ptr, "data_ptr"), DataSize(*v)));
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetValueData(const odla_value value, odla_void* data_ptr, odla_context context) {
  return Guard(__func__, [&] {
    Require(data_ptr, "data_ptr");
    _odla_value* v = Live(value, HandleKind::kValue, "value");
    if (context != nullptr && ReadResult(*LiveContext(context), *v, data_ptr)) return ODLA_SUCCESS;
    CheckCompiler(Compiler().read_data(Built(v)->object, data_ptr, DataSize(*v)));
    return ODLA_SUCCESS;
  });
}

odla_status odla_ReleaseValue(odla_value value) {
  return Guard(__func__, [&] {
    _odla_value* v = Built(value);
    Do(v->computation, "release_value", {V(v)});
    return ODLA_SUCCESS;
  });
}

odla_status odla_ReleaseValueById(odla_value_id value_id) {
  return odla_ReleaseValue(GuardValue<odla_value>(__func__, [&] { return FindId(value_id); }));
}

void odla_Dump(odla_value value) {
  Guard(__func__, [&] {
    _odla_value v = LiveCopy(value, "value");
    std::fprintf(stderr, "odla_value %s: element type %d, shape %s\n", v.id.c_str(),
                 static_cast<int>(v.type.element_type), ShapeText(v.type.shape).c_str());
    return ODLA_SUCCESS;
  });
}

}  // extern "C"
