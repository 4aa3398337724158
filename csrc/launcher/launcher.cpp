// chord_kernels._launcher: load cubins and launch kernels through the CUDA driver API.
//
// Why the driver API and dlopen: this module must build on a machine with no GPU
// and no driver (CI), and importing it must touch nothing on the GPU. So it declares
// the handful of driver types and entry points it needs itself and resolves them from
// libcuda.so.1 on first use. It does not link torch: callers pass raw device
// pointers, the stream handle and a packed parameter buffer (see chord_kernels.jit.launch).
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>
#include <stdexcept>
#include <string>
#include <utility>

namespace py = pybind11;

namespace {

// Minimal driver ABI (stable since CUDA 4.0; values from the driver API documentation).
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;

// A CUtensorMap's bytes, and cuTensorMapEncodeTiled's signature (CUDA 12.0+ drivers).
struct TensorMapBytes {
  alignas(64) std::uint64_t opaque[16];  // CUtensorMap
};
using EncodeTiled = CUresult (*)(TensorMapBytes*, int /*CUtensorMapDataType*/, unsigned /*rank*/, void* /*address*/,
                                 const std::uint64_t* /*dims*/, const std::uint64_t* /*strides, bytes*/,
                                 const unsigned* /*box*/, const unsigned* /*element strides*/, int /*interleave*/,
                                 int /*swizzle*/, int /*L2 promotion*/, int /*OOB fill*/);

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // Optional (null on a driver older than CUDA 12): every kernel that takes no tensor map still runs.
  EncodeTiled cuTensorMapEncodeTiled;
  // Module globals (the diagnostic builds' per-CTA records, chord_kernels.cta_trace); the _v2
  // entry points are the 64-bit ones cuda.h maps the plain names to.
  CUresult (*cuFuncGetModule)(CUmodule*, CUfunction);
  CUresult (*cuModuleGetGlobal)(CUdeviceptr*, size_t*, CUmodule, const char*);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
};

Driver g_driver{};
bool g_loaded = false;
std::mutex g_mutex;

template <typename F>
void resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) throw std::runtime_error(std::string("chord launcher: libcuda lacks ") + name);
}

const Driver& driver() {
  if (g_loaded) return g_driver;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_driver;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    throw std::runtime_error(
        "chord launcher: cannot open libcuda.so.1 (no NVIDIA driver on this machine?): " +
        std::string(dlerror()));
  }
  Driver d{};
  resolve(lib, "cuInit", d.cuInit);
  resolve(lib, "cuDeviceGet", d.cuDeviceGet);
  resolve(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain);
  resolve(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent);
  resolve(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent);
  resolve(lib, "cuModuleLoadData", d.cuModuleLoadData);
  resolve(lib, "cuModuleGetFunction", d.cuModuleGetFunction);
  resolve(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute);
  resolve(lib, "cuFuncGetAttribute", d.cuFuncGetAttribute);
  resolve(lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor", d.cuOccupancyMaxActiveBlocksPerMultiprocessor);
  resolve(lib, "cuLaunchKernel", d.cuLaunchKernel);
  resolve(lib, "cuGetErrorString", d.cuGetErrorString);
  d.cuTensorMapEncodeTiled = reinterpret_cast<EncodeTiled>(dlsym(lib, "cuTensorMapEncodeTiled"));
  // Optional too (diagnostics only): module_global says so if they are missing.
  d.cuFuncGetModule = reinterpret_cast<decltype(d.cuFuncGetModule)>(dlsym(lib, "cuFuncGetModule"));
  d.cuModuleGetGlobal = reinterpret_cast<decltype(d.cuModuleGetGlobal)>(dlsym(lib, "cuModuleGetGlobal_v2"));
  d.cuMemcpyDtoH = reinterpret_cast<decltype(d.cuMemcpyDtoH)>(dlsym(lib, "cuMemcpyDtoH_v2"));
  d.cuMemsetD8 = reinterpret_cast<decltype(d.cuMemsetD8)>(dlsym(lib, "cuMemsetD8_v2"));
  g_driver = d;
  g_loaded = true;
  return g_driver;
}

void check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  if (g_loaded) g_driver.cuGetErrorString(rc, &msg);
  throw std::runtime_error(std::string("chord launcher: ") + what + " failed: CUDA error " +
                           std::to_string(rc) + " (" + (msg ? msg : "unknown") + ")");
}

// A tiled tensor map (see csrc/common/tma_sm90.cuh and chord_kernels.tma, which picks the
// geometry): dims and box innermost first, strides (bytes) of dims 1.. ; no interleave, no
// swizzle, zero fill. Returns the 128 bytes the kernel takes in its parameters.
py::bytes encode_tensor_map(int dtype, std::uintptr_t address, const std::vector<std::uint64_t>& dims,
                            const std::vector<std::uint64_t>& strides, const std::vector<unsigned>& box,
                            int l2_promotion, int swizzle) {
  if (dims.empty() || dims.size() > 5 || strides.size() + 1 != dims.size() || box.size() != dims.size())
    throw std::invalid_argument("chord launcher: a tensor map takes 1-5 dims, one stride fewer, a box per dim");
  const EncodeTiled encode = driver().cuTensorMapEncodeTiled;  // opens libcuda (or says why it cannot)
  if (!encode) throw std::runtime_error("chord launcher: libcuda lacks cuTensorMapEncodeTiled (driver older than CUDA 12)");
  std::vector<unsigned> element_strides(dims.size(), 1);
  TensorMapBytes map;
  std::memset(&map, 0, sizeof(map));
  check(encode(&map, dtype, static_cast<unsigned>(dims.size()), reinterpret_cast<void*>(address), dims.data(),
               strides.data(), box.data(), element_strides.data(), /*interleave none*/ 0, swizzle,
               l2_promotion, /*OOB fill zeros*/ 0),
        "cuTensorMapEncodeTiled");
  return py::bytes(reinterpret_cast<const char*>(&map), sizeof(map));
}

// Make the device's primary context (the one torch uses) current on this thread.
CUcontext bind_primary_context(int device) {
  const Driver& d = driver();
  check(d.cuInit(0), "cuInit");
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  CUcontext ctx;
  check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

struct Kernel {
  CUfunction fn;
  CUcontext ctx;
};

// Load a cubin image on `device` and return (function handle, context handle) for `name`.
py::tuple load_kernel(py::bytes image, const std::string& name, int device,
                      int max_dynamic_smem) {
  CUcontext ctx = bind_primary_context(device);
  const Driver& d = driver();
  std::string data = image;  // cuModuleLoadData copies the image; keep ours alive for the call
  CUmodule mod;
  check(d.cuModuleLoadData(&mod, data.data()), "cuModuleLoadData");
  CUfunction fn;
  check(d.cuModuleGetFunction(&fn, mod, name.c_str()), ("cuModuleGetFunction(" + name + ")").c_str());
  if (max_dynamic_smem > 48 * 1024) {
    check(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, max_dynamic_smem),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  return py::make_tuple(reinterpret_cast<std::uintptr_t>(fn), reinterpret_cast<std::uintptr_t>(ctx));
}

py::dict function_attributes(std::uintptr_t fn_handle) {
  const Driver& d = driver();
  auto fn = reinterpret_cast<CUfunction>(fn_handle);
  int regs = 0, max_threads = 0;
  check(d.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "cuFuncGetAttribute(NUM_REGS)");
  check(d.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn),
        "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)");
  py::dict out;
  out["num_regs"] = regs;
  out["max_threads_per_block"] = max_threads;
  return out;
}

// CTAs of `fn` one SM holds at once with this block size and dynamic shared memory (what a
// persistent grid is sized by).
int max_active_blocks(std::uintptr_t fn_handle, std::uintptr_t ctx_handle, int threads, std::size_t smem) {
  const Driver& d = driver();
  check(d.cuCtxSetCurrent(reinterpret_cast<CUcontext>(ctx_handle)), "cuCtxSetCurrent");
  int blocks = 0;
  check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, reinterpret_cast<CUfunction>(fn_handle), threads, smem),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

// A __device__ global of the module that holds `fn` (C linkage name): its address and size.
std::pair<CUdeviceptr, size_t> module_global(std::uintptr_t fn_handle, std::uintptr_t ctx_handle, const std::string& name) {
  const Driver& d = driver();
  if (!d.cuFuncGetModule || !d.cuModuleGetGlobal || !d.cuMemcpyDtoH || !d.cuMemsetD8)
    throw std::runtime_error("chord launcher: libcuda lacks the module-global entry points (driver older than CUDA 11)");
  check(d.cuCtxSetCurrent(reinterpret_cast<CUcontext>(ctx_handle)), "cuCtxSetCurrent");
  CUmodule mod;
  check(d.cuFuncGetModule(&mod, reinterpret_cast<CUfunction>(fn_handle)), "cuFuncGetModule");
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  check(d.cuModuleGetGlobal(&ptr, &bytes, mod, name.c_str()), ("cuModuleGetGlobal(" + name + ")").c_str());
  return {ptr, bytes};
}

// The global's bytes, copied to the host (synchronous: the caller has synchronized the kernel's
// stream; for diagnostics, never on a launch path).
py::bytes read_global(std::uintptr_t fn_handle, std::uintptr_t ctx_handle, const std::string& name) {
  const auto [ptr, bytes] = module_global(fn_handle, ctx_handle, name);
  std::string host(bytes, '\0');
  check(driver().cuMemcpyDtoH(host.data(), ptr, bytes), "cuMemcpyDtoH");
  return py::bytes(host);
}

void zero_global(std::uintptr_t fn_handle, std::uintptr_t ctx_handle, const std::string& name) {
  const auto [ptr, bytes] = module_global(fn_handle, ctx_handle, name);
  check(driver().cuMemsetD8(ptr, 0, bytes), "cuMemsetD8");
}

// The launch itself, for both launch paths: the Python one (launch, below) and the fast call's
// C++ one (csrc/launcher/fast_call.cpp, which takes this function's address from launch_entry).
// Every Chord kernel takes one parameter, its struct by value: passed as kernelParams (the driver
// copies it to the parameter's own offset). Not as one raw parameter buffer: a struct aligned to
// 64 bytes (MoeTmaParams, holding tensor maps) does not start at the buffer's offset 0 (on sm_90
// it lands 48 bytes in), and the kernel would read every field shifted.
void launch_params(std::uintptr_t fn_handle, std::uintptr_t ctx_handle, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned smem, std::uintptr_t stream, void* params) {
  if (gx == 0 || gy == 0 || gz == 0) return;  // an empty problem launches nothing
  const Driver& d = driver();
  auto ctx = reinterpret_cast<CUcontext>(ctx_handle);
  CUcontext cur = nullptr;
  check(d.cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
  if (cur != ctx) check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  void* args[] = {params};
  check(d.cuLaunchKernel(reinterpret_cast<CUfunction>(fn_handle), gx, gy, gz, bx, by, bz, smem,
                         reinterpret_cast<CUstream>(stream), args, nullptr),
        "cuLaunchKernel");
}

// Hot path: no allocation, no Python object creation beyond argument parsing.
void launch(std::uintptr_t fn_handle, std::uintptr_t ctx_handle, unsigned gx, unsigned gy,
            unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
            std::uintptr_t stream, py::bytes params) {
  char* buf = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(params.ptr(), &buf, &size) != 0) throw py::error_already_set();
  launch_params(fn_handle, ctx_handle, gx, gy, gz, bx, by, bz, smem, stream, buf);
}

// launch_params behind a C signature (no exception crosses it): 0, or -1 with the error's text in
// `message` (at most `capacity` bytes, NUL-terminated). Its type is chord::LaunchEntry in
// fast_call.cpp; the fast call module gets its address from launch_entry().
extern "C" int chord_launch_entry(std::uintptr_t fn, std::uintptr_t ctx, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned bx, unsigned by, unsigned bz, unsigned smem, std::uintptr_t stream,
                                  void* params, char* message, std::size_t capacity) {
  try {
    launch_params(fn, ctx, gx, gy, gz, bx, by, bz, smem, stream, params);
    return 0;
  } catch (const std::exception& e) {
    if (capacity > 0) {
      std::strncpy(message, e.what(), capacity - 1);
      message[capacity - 1] = '\0';
    }
    return -1;
  }
}

}  // namespace

PYBIND11_MODULE(_launcher, m) {
  m.doc() = "Chord's CUDA driver-API launcher (libcuda is opened on first use, never at import)";
  m.def("driver_loaded", [] { return g_loaded; },
        "True once libcuda has been opened by this process (import never opens it).");
  m.def("load_kernel", &load_kernel, py::arg("image"), py::arg("name"), py::arg("device"),
        py::arg("max_dynamic_smem") = 0);
  m.def("encode_tensor_map", &encode_tensor_map, py::arg("dtype"), py::arg("address"), py::arg("dims"),
        py::arg("strides"), py::arg("box"), py::arg("l2_promotion"), py::arg("swizzle") = 0);
  m.def("function_attributes", &function_attributes, py::arg("fn"));
  m.def("max_active_blocks", &max_active_blocks, py::arg("fn"), py::arg("ctx"), py::arg("threads"), py::arg("smem"));
  m.def("read_global", &read_global, py::arg("fn"), py::arg("ctx"), py::arg("name"));
  m.def("zero_global", &zero_global, py::arg("fn"), py::arg("ctx"), py::arg("name"));
  m.def("launch", &launch, py::arg("fn"), py::arg("ctx"), py::arg("gx"), py::arg("gy"),
        py::arg("gz"), py::arg("bx"), py::arg("by"), py::arg("bz"), py::arg("smem"),
        py::arg("stream"), py::arg("params"));
  m.def("launch_entry", [] { return reinterpret_cast<std::uintptr_t>(&chord_launch_entry); },
        "The address of the C launch entry the fast call module launches through (fast_call.cpp).");
}
