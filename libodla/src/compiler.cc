// libodla_tvm_compiler.so: the build path of the C library, calls of odla_tvm's Python API.
// It uses the process's interpreter where one runs (a Python program that loaded the library
// with ctypes), else starts one, once, that finds the virtualenv odla-tvm was built in
// ($VIRTUAL_ENV, else the Python that built the library). Every call holds the GIL only
// while it runs, taken with PyGILState_Ensure, so any thread may call.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "compiler_api.h"

#ifndef ODLA_TVM_PYTHON
#error "ODLA_TVM_PYTHON: the Python executable of the virtualenv odla-tvm is installed in"
#endif

namespace {

thread_local std::string last_error;
PyObject* odla_tvm_module = nullptr;
PyObject* value_class = nullptr;
odla_status start_status = ODLA_SUCCESS;
std::once_flag started;

// A new reference to odla_tvm.<name>, or NULL with a Python error set.
PyObject* Api(const char* name) { return PyObject_GetAttrString(odla_tvm_module, name); }

// The pending Python error as an ODLA status and last_error (an OdlaError keeps its status).
odla_status TakeError() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  odla_status status = ODLA_FAILURE;
  last_error = "unknown Python error";
  if (value != nullptr) {
    PyObject* code = PyObject_GetAttrString(value, "status");
    if (code != nullptr && PyLong_Check(code))
      status = static_cast<odla_status>(PyLong_AsLong(code));
    else
      PyErr_Clear();
    Py_XDECREF(code);
    PyObject* text = PyObject_Str(value);
    const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
    if (utf8 != nullptr) {
      std::string kind = status == ODLA_FAILURE ? std::string(Py_TYPE(value)->tp_name) + ": " : "";
      last_error = kind + utf8;
    }
    Py_XDECREF(text);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return status;
}

void Start() {
  if (!Py_IsInitialized()) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    const char* venv = std::getenv("VIRTUAL_ENV");
    std::string program = venv ? std::string(venv) + "/bin/python" : ODLA_TVM_PYTHON;
    PyConfig_SetBytesString(&config, &config.program_name, program.c_str());
    config.install_signal_handlers = 0;  // the C program's signals stay its own
    PyStatus status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
      start_status = ODLA_DL_ERROR;
      last_error = std::string("the Python interpreter did not start: ") +
                   (status.err_msg ? status.err_msg : "no message");
      return;
    }
    PyEval_SaveThread();  // from now on every call takes the GIL itself
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  odla_tvm_module = PyImport_ImportModule("odla_tvm");
  if (odla_tvm_module != nullptr) value_class = Api("Value");
  if (value_class == nullptr) {
    start_status = TakeError();
    last_error = "odla_tvm does not import (" + last_error + "); run with the virtualenv "
                 "odla-tvm is installed in ($VIRTUAL_ENV)";
    start_status = ODLA_DL_ERROR;
  }
  PyGILState_Release(gil);
}

// Holds the GIL for its scope, once the interpreter has started.
struct Gil {
  PyGILState_STATE state;
  Gil() : state(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state); }
};

odla_status Started() {
  std::call_once(started, Start);
  if (start_status != ODLA_SUCCESS) {
    std::string message = last_error;  // Start's message, for this thread too
    last_error = message.empty() ? "the Python interpreter did not start" : message;
  }
  return start_status;
}

PyObject* ObjectOrNone(odla_tvm_object object) {
  PyObject* o = object ? static_cast<PyObject*>(object) : Py_None;
  Py_INCREF(o);
  return o;
}

PyObject* Dims(const odla_value_shape& shape) {
  int rank = shape.size < 0 ? 0 : shape.size;
  PyObject* dims = PyTuple_New(rank);
  for (int i = 0; i < rank; ++i) PyTuple_SET_ITEM(dims, i, PyLong_FromLongLong(shape.dims[i]));
  return dims;
}

PyObject* ValueType(const odla_value_type& type) {
  PyObject* cls = Api("ValueType");
  if (cls == nullptr) return nullptr;
  PyObject* dims = Dims(type.shape);
  PyObject* result = PyObject_CallFunction(cls, "iO", static_cast<int>(type.element_type), dims);
  Py_DECREF(dims);
  Py_DECREF(cls);
  return result;
}

// A NumPy array holding a copy of `arg.data`, of `arg.type`.
PyObject* Data(const odla_tvm_arg& arg) {
  PyObject* type = ValueType(arg.type);
  if (type == nullptr) return nullptr;
  PyObject* dtype = PyObject_GetAttrString(type, "dtype");
  Py_DECREF(type);
  if (dtype == nullptr) return nullptr;
  PyObject* itemsize = PyObject_GetAttrString(dtype, "itemsize");
  long long count = 1;
  for (int i = 0; i < arg.type.shape.size; ++i) count *= arg.type.shape.dims[i];
  Py_ssize_t bytes = static_cast<Py_ssize_t>(count * (itemsize ? PyLong_AsLongLong(itemsize) : 0));
  Py_XDECREF(itemsize);
  PyObject* view = PyMemoryView_FromMemory(static_cast<char*>(const_cast<void*>(arg.data)),
                                           bytes, PyBUF_READ);
  PyObject* numpy = PyImport_ImportModule("numpy");
  PyObject* array = nullptr;
  if (view != nullptr && numpy != nullptr) {
    PyObject* flat = PyObject_CallMethod(numpy, "frombuffer", "OO", view, dtype);
    PyObject* dims = Dims(arg.type.shape);
    PyObject* reshape = flat ? PyObject_GetAttrString(flat, "reshape") : nullptr;
    // called with the tuple as its one argument (a () shape is a scalar's)
    if (reshape != nullptr) array = PyObject_CallFunctionObjArgs(reshape, dims, nullptr);
    Py_XDECREF(reshape);
    Py_XDECREF(flat);
    Py_DECREF(dims);
    if (array != nullptr) {
      PyObject* copy = PyObject_CallMethod(array, "copy", nullptr);
      Py_DECREF(array);
      array = copy;
    }
  }
  Py_XDECREF(numpy);
  Py_XDECREF(view);
  Py_DECREF(dtype);
  return array;
}

PyObject* Argument(const odla_tvm_arg& arg) {
  switch (arg.kind) {
    case ODLA_TVM_ARG_NONE:
      Py_RETURN_NONE;
    case ODLA_TVM_ARG_OBJECT:
      return ObjectOrNone(arg.objects ? arg.objects[0] : nullptr);
    case ODLA_TVM_ARG_OBJECTS: {
      PyObject* list = PyList_New(static_cast<Py_ssize_t>(arg.count));
      for (odla_size_t i = 0; i < arg.count; ++i)
        PyList_SET_ITEM(list, i, ObjectOrNone(arg.objects[i]));
      return list;
    }
    case ODLA_TVM_ARG_INT:
      return PyLong_FromLongLong(arg.integer);
    case ODLA_TVM_ARG_FLOAT:
      return PyFloat_FromDouble(arg.real);
    case ODLA_TVM_ARG_STRING:
      if (arg.text == nullptr) Py_RETURN_NONE;
      return PyUnicode_DecodeUTF8(arg.text, static_cast<Py_ssize_t>(std::strlen(arg.text)),
                                  "replace");
    case ODLA_TVM_ARG_STRINGS: {
      PyObject* list = PyList_New(static_cast<Py_ssize_t>(arg.count));
      for (odla_size_t i = 0; i < arg.count; ++i) {
        const char* t = arg.texts[i];
        PyObject* item = t ? PyUnicode_DecodeUTF8(t, static_cast<Py_ssize_t>(std::strlen(t)),
                                                  "replace")
                           : (Py_INCREF(Py_None), Py_None);
        PyList_SET_ITEM(list, i, item);
      }
      return list;
    }
    case ODLA_TVM_ARG_INTS: {
      PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(arg.count));
      for (odla_size_t i = 0; i < arg.count; ++i)
        PyTuple_SET_ITEM(tuple, i, PyLong_FromLongLong(arg.ints[i]));
      return tuple;
    }
    case ODLA_TVM_ARG_TYPE:
      return ValueType(arg.type);
    case ODLA_TVM_ARG_DATA:
      return Data(arg);
  }
  PyErr_SetString(PyExc_ValueError, "unknown argument kind");
  return nullptr;
}

odla_status Results(PyObject* result, odla_tvm_object* results, odla_size_t* count) {
  *count = 0;
  if (result == Py_None) return ODLA_SUCCESS;
  bool one = PyObject_IsInstance(result, value_class) == 1 ||
             !(PyList_Check(result) || PyTuple_Check(result));
  if (one) {
    Py_INCREF(result);
    results[(*count)++] = result;
    return ODLA_SUCCESS;
  }
  PyObject* sequence = PySequence_Fast(result, "not a sequence");
  if (sequence == nullptr) return TakeError();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  if (n > ODLA_MAX_OUTPUTS) n = ODLA_MAX_OUTPUTS;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(sequence, i);
    Py_INCREF(item);
    results[(*count)++] = item;
  }
  Py_DECREF(sequence);
  return ODLA_SUCCESS;
}

odla_status Call(const char* function, odla_tvm_object computation, const odla_tvm_arg* args,
                 odla_size_t count, odla_tvm_object* results, odla_size_t* result_count) {
  *result_count = 0;
  if (odla_status s = Started()) return s;
  Gil gil;
  if (computation != nullptr) {
    PyObject* made = PyObject_CallMethod(static_cast<PyObject*>(computation), "make_current",
                                         nullptr);
    if (made == nullptr) return TakeError();
    Py_DECREF(made);
  }
  PyObject* callable = Api(function);
  if (callable == nullptr) return TakeError();
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(count));
  for (odla_size_t i = 0; i < count; ++i) {
    PyObject* a = Argument(args[i]);
    if (a == nullptr) {
      Py_DECREF(tuple);
      Py_DECREF(callable);
      return TakeError();
    }
    PyTuple_SET_ITEM(tuple, i, a);
  }
  PyObject* result = PyObject_Call(callable, tuple, nullptr);
  Py_DECREF(tuple);
  Py_DECREF(callable);
  if (result == nullptr) return TakeError();
  odla_status status = Results(result, results, result_count);
  Py_DECREF(result);
  return status;
}

odla_status Integer(const char* function, odla_tvm_object computation, odla_int64* result) {
  if (odla_status s = Started()) return s;
  Gil gil;
  PyObject* callable = Api(function);
  PyObject* value = callable ? PyObject_CallFunctionObjArgs(
                                   callable, static_cast<PyObject*>(computation), nullptr)
                             : nullptr;
  Py_XDECREF(callable);
  if (value == nullptr) return TakeError();
  *result = PyLong_AsLongLong(value);
  Py_DECREF(value);
  return PyErr_Occurred() ? TakeError() : ODLA_SUCCESS;
}

odla_status Describe(odla_tvm_object object, const char** id, odla_value_type* type) {
  Gil gil;
  PyObject* value = static_cast<PyObject*>(object);
  PyObject* id_object = PyObject_GetAttrString(value, "id");
  PyObject* type_object = PyObject_GetAttrString(value, "type");
  PyObject* element = type_object ? PyObject_GetAttrString(type_object, "element_type") : nullptr;
  PyObject* shape = type_object ? PyObject_GetAttrString(type_object, "shape") : nullptr;
  PyObject* dims = shape ? PyObject_GetAttrString(shape, "dims") : nullptr;
  odla_status status = ODLA_SUCCESS;
  if (id_object == nullptr || element == nullptr || dims == nullptr) {
    status = TakeError();
  } else {
    *id = PyUnicode_AsUTF8(id_object);  // cached in the str, which the Value keeps
    std::memset(type, 0, sizeof(*type));
    type->element_type = static_cast<odla_element_type>(PyLong_AsLong(element));
    Py_ssize_t rank = PyTuple_Size(dims);
    type->shape.size = static_cast<odla_int32>(rank);
    for (Py_ssize_t i = 0; i < rank && i < ODLA_MAX_DIMENSION; ++i)
      type->shape.dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(dims, i));
    if (PyErr_Occurred()) status = TakeError();
  }
  Py_XDECREF(dims);
  Py_XDECREF(shape);
  Py_XDECREF(element);
  Py_XDECREF(type_object);
  Py_XDECREF(id_object);
  return status;
}

// Copies the bytes-like `blob` into `*bytes`, malloc'ed.
odla_status CopyBytes(PyObject* blob, char** bytes, odla_size_t* size) {
  Py_buffer view;
  if (PyObject_GetBuffer(blob, &view, PyBUF_CONTIG_RO) != 0) return TakeError();
  *bytes = static_cast<char*>(std::malloc(view.len ? view.len : 1));
  if (*bytes == nullptr) {
    PyBuffer_Release(&view);
    last_error = "out of memory";
    return ODLA_MEM_ERROR;
  }
  std::memcpy(*bytes, view.buf, view.len);
  *size = static_cast<odla_size_t>(view.len);
  PyBuffer_Release(&view);
  return ODLA_SUCCESS;
}

odla_status Compile(odla_tvm_object computation, char** bytes, odla_size_t* size) {
  if (odla_status s = Started()) return s;
  Gil gil;
  PyObject* compile = Api("compile_computation");
  PyObject* store = Api("store_executable");
  PyObject* destroy = Api("destroy_executable");
  PyObject* executable = compile ? PyObject_CallFunctionObjArgs(
                                       compile, static_cast<PyObject*>(computation), nullptr)
                                 : nullptr;
  PyObject* blob = executable && store ? PyObject_CallFunctionObjArgs(store, Py_None, executable,
                                                                      nullptr)
                                       : nullptr;
  odla_status status = blob ? CopyBytes(blob, bytes, size) : TakeError();
  if (executable != nullptr && destroy != nullptr) {
    Py_XDECREF(PyObject_CallFunctionObjArgs(destroy, executable, nullptr));
    PyErr_Clear();
  }
  Py_XDECREF(blob);
  Py_XDECREF(executable);
  Py_XDECREF(destroy);
  Py_XDECREF(store);
  Py_XDECREF(compile);
  return status;
}

void FreeBytes(char* bytes) { std::free(bytes); }

odla_status ReadData(odla_tvm_object value, void* data, odla_size_t size) {
  if (odla_status s = Started()) return s;
  Gil gil;
  PyObject* get = Api("get_value_data");
  PyObject* array = get ? PyObject_CallFunctionObjArgs(get, static_cast<PyObject*>(value), nullptr)
                        : nullptr;
  Py_XDECREF(get);
  if (array == nullptr) return TakeError();
  PyObject* numpy = PyImport_ImportModule("numpy");
  PyObject* contiguous =
      numpy ? PyObject_CallMethod(numpy, "ascontiguousarray", "O", array) : nullptr;
  Py_XDECREF(numpy);
  Py_DECREF(array);
  if (contiguous == nullptr) return TakeError();
  Py_buffer view;
  odla_status status = ODLA_SUCCESS;
  if (PyObject_GetBuffer(contiguous, &view, PyBUF_CONTIG_RO) != 0) {
    status = TakeError();
  } else {
    if (static_cast<odla_size_t>(view.len) != size) {
      last_error = "the value holds " + std::to_string(view.len) + " bytes; its type says " +
                   std::to_string(size);
      status = ODLA_INTERNAL_LOGIC_ERR;
    } else {
      std::memcpy(data, view.buf, size);
    }
    PyBuffer_Release(&view);
  }
  Py_DECREF(contiguous);
  return status;
}

void Release(odla_tvm_object object) {
  if (object == nullptr || !Py_IsInitialized()) return;
  Gil gil;
  Py_DECREF(static_cast<PyObject*>(object));
}

const char* LastError() { return last_error.c_str(); }

const odla_tvm_compiler_api api = {Call, Integer, Describe, Compile, FreeBytes, ReadData, Release,
                                   LastError};

}  // namespace

extern "C" __attribute__((visibility("default")))
const odla_tvm_compiler_api* odla_tvm_compiler(void) {
  return &api;
}
