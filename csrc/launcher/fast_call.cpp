// chord_kernels' fast call: the entry points' launch path (plan lookup, parameter pack, launch)
// in C++, for the host-time target of issue 4 (<= 5 µs a call in eager mode).
//
// Why: the Python launch path (chord_kernels.ops) keys its plans on ~20 tensor attributes, and
// each read builds a Python object (0.15-0.3 µs: torch.Size, tuples, dtypes); the key, the pointer
// reads and the struct pack were ~3.9 µs of Python a call on an H100 host where the launch alone
// takes 3.5 (docs/design/indexed-kernels.md, "Host overhead per call"). Here the same reads are
// fields of torch's TensorImpl: ~0.1 µs for every tensor of a call (an indexed call 7.0-7.3 ->
// 3.8-4.2 µs on that host).
//
// What it is not: a second implementation of the entry points. It launches only what the Python
// path planned and launched before for the same signature. A call it does not know (a new
// signature, a new weight address where the parameters carry tensor maps, a misaligned `a`, any
// argument it cannot read) returns False, and the caller runs the Python path, which checks,
// plans, raises or launches, then records its launch here (remember). So every check and every
// error message stays in one place, the Python path.
//
// The signature (the plan's key) is a superset of the Python path's: every present tensor's
// dims, sizes, strides, dtype and device, the caller's ints, and the environment overrides the
// Python path reads (from os.environ's own bytes mapping, so both read the same values). A hit
// therefore names the plan the Python path would pick. Built at run time against the process's
// torch (chord_kernels.jit.fast_call: content-hashed, cached, precompiled by `chord-runtime
// precompile`); it links torch's C++ ABI, which the launcher (launcher.cpp) avoids.
//
// Not thread-free: every function runs under the GIL and keeps it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kSlots = 10;  // MoeParams' pointers (csrc/common/moe_params.cuh)
constexpr int kInts = 3;    // the caller's ints that are part of a signature
constexpr int kOperands = 4;  // a, qweight, scale, out: MoeParams' slots 0-3
constexpr int kRoutes = 3;    // the routing tensors, each to its form's slot
constexpr Py_ssize_t kCallArgs = 1 + kInts + kOperands + kRoutes;  // form, ints, operands, routes
constexpr std::size_t kPointerBytes = kSlots * sizeof(std::uint64_t);
constexpr std::size_t kMaxParamBytes = 4096;  // a kernel's parameter space (sm_90 without the 12.1 opt-in)
constexpr std::size_t kTailsKept = 4096;      // address keys kept a plan (ops.TAILS_KEPT)
// The forms (chord_kernels.jit.fast_call: INDEXED, CONTIGUOUS, CONTIGUOUS_OFFSETS, MASKED) and the
// MoeParams slot of each routing tensor (-1: none): indexed's sorted_ids, expert_ids and
// num_tokens_padded; the grouped forms' m_indices, expert_offsets or masked_m.
constexpr int kForms = 4;
constexpr int kRouteSlot[kForms][kRoutes] = {{4, 5, 6}, {7, -1, -1}, {8, -1, -1}, {9, -1, -1}};

// chord_launch_entry's type (launcher.cpp): 0, or -1 with the error's text in `message`.
using LaunchEntry = int (*)(std::uintptr_t fn, std::uintptr_t ctx, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned smem, std::uintptr_t stream, void* params, char* message,
                            std::size_t capacity);

struct KernelLaunch {
  std::uintptr_t fn, ctx;
  unsigned grid[3], block[3], smem;
};

struct Plan {
  std::vector<KernelLaunch> launches;  // one, or a pair (both on the call's stream, in order)
  long device;                          // the stream's device
  std::vector<int> address_slots;       // the slots whose addresses the tails depend on (tensor maps)
  // address key -> the parameters after the pointers, one per launch
  std::unordered_map<std::string, std::vector<std::string>> tails;
};

struct State {
  LaunchEntry launch = nullptr;
  PyObject* launch_hook = nullptr;  // tests: called instead of the driver
  PyObject* stream_of = nullptr;    // device index -> raw stream (torch's current stream)
  PyObject* environ = nullptr;      // os.environ's bytes mapping
  std::array<std::vector<PyObject*>, kForms> env_keys;  // per form: the variables its signature reads
  std::unordered_map<std::string, Plan> plans;
  bool configured = false;
};
State g;

void put(std::string& key, std::int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); }

bool read_signature(PyObject* const* args, std::string& key, std::uint64_t* ptrs);

// The call's signature into `key` and its slots' addresses into `ptrs`; false where an argument
// is not what the fast path reads (no Python error is left set, no C++ exception escapes: torch
// throws c10::Error on a tensor with no data, say).
bool signature(PyObject* const* args, std::string& key, std::uint64_t* ptrs) {
  try {
    return read_signature(args, key, ptrs);
  } catch (...) {
    return false;
  }
}

bool read_signature(PyObject* const* args, std::string& key, std::uint64_t* ptrs) {
  const long form = PyLong_AsLong(args[0]);
  if (form < 0 || form >= kForms) {
    PyErr_Clear();
    return false;
  }
  put(key, form);
  for (int i = 0; i < kInts; ++i) {
    PyObject* v = args[1 + i];
    if (v == Py_None) {
      put(key, INT64_MIN);
      continue;
    }
    if (!PyLong_CheckExact(v)) return false;
    const long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    put(key, x);
  }
  std::memset(ptrs, 0, kPointerBytes);
  for (int i = 0; i < kOperands + kRoutes; ++i) {
    PyObject* obj = args[1 + kInts + i];
    const int slot = i < kOperands ? i : kRouteSlot[form][i - kOperands];
    if (obj == Py_None) {
      put(key, -1);
      continue;
    }
    if (slot < 0 || !THPVariable_Check(obj)) return false;
    const at::TensorBase& t = THPVariable_Unpack(obj);
    if (!t.defined() || !t.has_storage()) return false;
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    put(key, static_cast<std::int64_t>(sizes.size()));
    for (const auto v : sizes) put(key, v);
    for (const auto v : strides) put(key, v);
    put(key, static_cast<std::int64_t>(t.scalar_type()));
    put(key, static_cast<std::int64_t>(t.device().type()));
    put(key, t.device().index());
    ptrs[slot] = reinterpret_cast<std::uint64_t>(t.data_ptr());
  }
  for (PyObject* name : g.env_keys[form]) {
    PyObject* value = PyDict_GetItemWithError(g.environ, name);  // borrowed
    if (!value) {
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      put(key, -1);
      continue;
    }
    if (!PyBytes_Check(value)) return false;
    put(key, PyBytes_GET_SIZE(value));
    key.append(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
  }
  return true;
}

std::string address_key(const Plan& plan, const std::uint64_t* ptrs) {
  std::string key;
  for (const int s : plan.address_slots) put(key, static_cast<std::int64_t>(ptrs[s]));
  return key;
}

bool launch_one(const KernelLaunch& l, std::uintptr_t stream, char* params, std::size_t size) {
  if (g.launch_hook) {
    PyObject* r = PyObject_CallFunction(g.launch_hook, "KK(III)(III)IKy#", (unsigned long long)l.fn,
                                        (unsigned long long)l.ctx, l.grid[0], l.grid[1], l.grid[2], l.block[0],
                                        l.block[1], l.block[2], l.smem, (unsigned long long)stream, params,
                                        (Py_ssize_t)size);
    Py_XDECREF(r);
    return r != nullptr;
  }
  char message[512] = {0};
  if (g.launch(l.fn, l.ctx, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.smem, stream, params,
               message, sizeof(message)) != 0) {
    PyErr_SetString(PyExc_RuntimeError, message);
    return false;
  }
  return true;
}

// call(form, i0, i1, i2, a, qweight, scale, out, r0, r1, r2) -> bool: launched (True), or not known here (False: run the
// Python path). Raises only when a known launch fails.
PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kCallArgs) {
    PyErr_Format(PyExc_TypeError, "fast_call.call takes %zd arguments, got %zd", kCallArgs, nargs);
    return nullptr;
  }
  if (!g.configured) Py_RETURN_FALSE;
  thread_local std::string key;
  key.clear();
  std::uint64_t ptrs[kSlots];
  if (!signature(args, key, ptrs)) Py_RETURN_FALSE;
  const auto plan = g.plans.find(key);
  if (plan == g.plans.end()) Py_RETURN_FALSE;
  if (ptrs[0] % 16) Py_RETURN_FALSE;  // the Python path says why (a's start must be 16-byte aligned)
  const auto tails = plan->second.tails.find(address_key(plan->second, ptrs));
  if (tails == plan->second.tails.end()) Py_RETURN_FALSE;
  PyObject* device = PyLong_FromLong(plan->second.device);
  PyObject* stream_obj = device ? PyObject_CallOneArg(g.stream_of, device) : nullptr;
  Py_XDECREF(device);
  if (!stream_obj) return nullptr;
  const std::uintptr_t stream = PyLong_AsUnsignedLongLong(stream_obj);
  Py_DECREF(stream_obj);
  if (PyErr_Occurred()) return nullptr;
  alignas(64) char params[kMaxParamBytes];
  std::memcpy(params, ptrs, kPointerBytes);
  for (std::size_t i = 0; i < plan->second.launches.size(); ++i) {
    const std::string& tail = tails->second[i];
    std::memcpy(params + kPointerBytes, tail.data(), tail.size());
    if (!launch_one(plan->second.launches[i], stream, params, kPointerBytes + tail.size())) return nullptr;
  }
  Py_RETURN_TRUE;
}

bool read_uints(PyObject* seq, unsigned* out, int n) {
  if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) return false;
  for (int i = 0; i < n; ++i) {
    out[i] = static_cast<unsigned>(PyLong_AsUnsignedLong(PyTuple_GET_ITEM(seq, i)));
    if (PyErr_Occurred()) return false;
  }
  return true;
}

// remember(form, i0, i1, i2, a, qweight, scale, out, r0, r1, r2, launches, device, address_slots): what the Python path
// just launched for this call, recorded under the call's signature. launches: a list of
// (fn, ctx, grid 3-tuple, block 3-tuple, smem, params bytes), in launch order. Each launch's
// params must start with this call's pointers, as call() packs them: a launch path that packed
// them otherwise would be a bug, so it raises. address_slots: the slots whose addresses the
// parameters after the pointers depend on (the weight's and a's tensor maps; empty: none).
PyObject* remember(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kCallArgs + 3) {
    PyErr_Format(PyExc_TypeError, "fast_call.remember takes %zd arguments, got %zd", kCallArgs + 3, nargs);
    return nullptr;
  }
  std::string key;
  std::uint64_t ptrs[kSlots];
  if (!g.configured || !signature(args, key, ptrs)) Py_RETURN_FALSE;
  PyObject* launches = args[kCallArgs];
  if (!PyList_Check(launches) || PyList_GET_SIZE(launches) < 1 || PyList_GET_SIZE(launches) > 2) {
    PyErr_SetString(PyExc_ValueError, "fast_call.remember: launches must be a list of one or two launches");
    return nullptr;
  }
  Plan fresh;
  fresh.device = PyLong_AsLong(args[kCallArgs + 1]);
  PyObject* slots = args[kCallArgs + 2];
  if (PyErr_Occurred() || !PyTuple_Check(slots)) {
    PyErr_SetString(PyExc_ValueError, "fast_call.remember: device must be an int and address_slots a tuple");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots); ++i) {
    const long s = PyLong_AsLong(PyTuple_GET_ITEM(slots, i));
    if (s < 0 || s >= kSlots) {
      PyErr_SetString(PyExc_ValueError, "fast_call.remember: an address slot is out of range");
      return nullptr;
    }
    fresh.address_slots.push_back(static_cast<int>(s));
  }
  std::vector<std::string> tails;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(launches); ++i) {
    PyObject* item = PyList_GET_ITEM(launches, i);
    KernelLaunch l{};
    PyObject *grid = nullptr, *block = nullptr;
    const char* params = nullptr;
    Py_ssize_t size = 0;
    unsigned long long fn = 0, ctx = 0;
    if (!PyArg_ParseTuple(item, "KKOOIy#", &fn, &ctx, &grid, &block, &l.smem, &params, &size)) return nullptr;
    l.fn = fn, l.ctx = ctx;
    if (!read_uints(grid, l.grid, 3) || !read_uints(block, l.block, 3)) {
      PyErr_SetString(PyExc_ValueError, "fast_call.remember: grid and block must be 3-tuples of ints");
      return nullptr;
    }
    if (size < (Py_ssize_t)kPointerBytes || size > (Py_ssize_t)kMaxParamBytes ||
        std::memcmp(params, ptrs, kPointerBytes) != 0) {
      PyErr_SetString(PyExc_ValueError,
                      "fast_call.remember: the launch's parameters do not start with this call's pointers");
      return nullptr;
    }
    fresh.launches.push_back(l);
    tails.emplace_back(params + kPointerBytes, size - kPointerBytes);
  }
  auto [it, inserted] = g.plans.try_emplace(key, std::move(fresh));
  Plan& plan = it->second;
  if (!inserted) {
    // The same signature planned again (a new address key): the launches must be the same ones.
    if (plan.launches.size() != tails.size() || plan.address_slots != fresh.address_slots) {
      PyErr_SetString(PyExc_ValueError, "fast_call.remember: a known signature with other launches");
      return nullptr;
    }
  }
  if (plan.tails.size() >= kTailsKept) plan.tails.clear();
  plan.tails[address_key(plan, ptrs)] = std::move(tails);
  Py_RETURN_TRUE;
}

void hold(PyObject*& ref, PyObject* value) {
  Py_XINCREF(value);
  Py_XSETREF(ref, value);
}

// configure(launch_entry, stream_of, environ, env_keys, launch_hook=None): the launcher's C entry
// (its address), torch's raw current-stream query, os.environ's bytes mapping, and per form the
// variables (bytes) its signature reads. Forgets every plan.
PyObject* configure(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "fast_call.configure(launch_entry, stream_of, environ, env_keys, launch_hook)");
    return nullptr;
  }
  const unsigned long long entry = PyLong_AsUnsignedLongLong(args[0]);
  if (PyErr_Occurred()) return nullptr;
  if (!PyCallable_Check(args[1]) || !PyDict_Check(args[2]) || !PyList_Check(args[3]) ||
      PyList_GET_SIZE(args[3]) > kForms || (args[4] != Py_None && !PyCallable_Check(args[4]))) {
    PyErr_SetString(PyExc_TypeError,
                    "fast_call.configure: stream_of callable, environ a dict, env_keys a list (a list of bytes a form), "
                    "launch_hook callable or None");
    return nullptr;
  }
  for (auto& keys : g.env_keys) {
    for (PyObject* k : keys) Py_DECREF(k);
    keys.clear();
  }
  for (Py_ssize_t f = 0; f < PyList_GET_SIZE(args[3]); ++f) {
    PyObject* names = PyList_GET_ITEM(args[3], f);
    if (!PyList_Check(names)) {
      PyErr_SetString(PyExc_TypeError, "fast_call.configure: env_keys[form] must be a list of bytes");
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); ++i) {
      PyObject* name = PyList_GET_ITEM(names, i);
      if (!PyBytes_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "fast_call.configure: env_keys[form] must be a list of bytes");
        return nullptr;
      }
      Py_INCREF(name);
      g.env_keys[f].push_back(name);
    }
  }
  g.launch = reinterpret_cast<LaunchEntry>(static_cast<std::uintptr_t>(entry));
  hold(g.stream_of, args[1]);
  hold(g.environ, args[2]);
  hold(g.launch_hook, args[4] == Py_None ? nullptr : args[4]);
  g.plans.clear();
  g.configured = g.launch != nullptr || g.launch_hook != nullptr;
  Py_RETURN_NONE;
}

PyObject* forget(PyObject*, PyObject*) {
  g.plans.clear();
  Py_RETURN_NONE;
}

PyObject* plan_count(PyObject*, PyObject*) { return PyLong_FromSize_t(g.plans.size()); }

PyMethodDef methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL,
     "call(form, i0, i1, i2, a, qweight, scale, out, r0, r1, r2) -> bool: launch a known call (True), or False: "
     "run the Python path"},
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(remember)), METH_FASTCALL,
     "remember(form, i0, i1, i2, a, qweight, scale, out, r0, r1, r2, launches, device, address_slots): record the "
     "Python path's launch"},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure)), METH_FASTCALL,
     "configure(launch_entry, stream_of, environ, env_keys, launch_hook): set up; forgets every plan"},
    {"forget", forget, METH_NOARGS, "forget every plan"},
    {"plan_count", plan_count, METH_NOARGS, "the signatures known"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chord_fast_call",
                      "Chord's launch path in C++ (chord_kernels.jit.fast_call)", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__chord_fast_call() { return PyModule_Create(&module); }
