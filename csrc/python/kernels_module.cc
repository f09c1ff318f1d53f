// detconv._kernels: the raw CPU and CUDA kernels for Python, without TensorFlow.
//
// This module is deliberately thin: detconv/kernels.py checks the arrays,
// allocates outputs and workspaces with the caller's own library (NumPy, CuPy,
// PyTorch), and passes raw data pointers here. CPU kernels run on the calling thread
// and parked pool threads (worker_pool.h) with the GIL released; GPU kernels are enqueued on the stream the
// caller passes (CuPy's / PyTorch's current stream) on the current device.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "detconv/kernels.h"
#include "detconv/order.h"
#include "detconv/problem.h"
#include "detconv/unit_queue.h"
#include "python/worker_pool.h"

#if defined(DETCONV_MODULE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace py = pybind11;
using namespace detconv;

namespace {

// Runs a parallel_for on up to `threads` threads (the calling thread one of
// them, the others from WorkerPool), each draining one UnitQueue. Kernels partition over outputs (or dw
// chunks) only, so the partition never changes a bit.
class ThreadExecutor : public CpuExecutor {
 public:
  explicit ThreadExecutor(int threads) : threads_(threads > 0 ? threads : 1) {}

  int threads() const override { return threads_; }

  void parallel_for(i64 units, i64 cost_per_unit, const std::function<void(i64, i64)>& fn) const override {
    if (units <= 0) return;
    // About 64k cost units per thread at least: below that, starting a thread costs more than it saves.
    const i64 cost = std::max<i64>(cost_per_unit, 1);
    const i64 by_cost = std::max<i64>(1, (units * cost) / 65536);
    const i64 t = std::min<i64>({i64(threads_), units, by_cost});
    if (t <= 1) {
      fn(0, units);
      return;
    }
    UnitQueue queue(units, cost, t);
    const std::function<void()> drain = [&] { queue.drain(fn); };
    if (!WorkerPool::instance().run(int(t - 1), drain)) {  // in use (another caller): threads of its own
      std::vector<std::thread> pool;
      pool.reserve(std::size_t(t - 1));
      try {
        for (i64 k = 1; k < t; ++k) pool.emplace_back(drain);
      } catch (const std::system_error&) {  // no thread to be had: those started share the queue
      }
      drain();
      for (auto& th : pool) th.join();
    }
    queue.rethrow_first();
  }

 private:
  int threads_;
};

// Read once: hardware_concurrency() reads /sys on every call (~6 us, as much as a tiny convolution).
int default_threads() {
  static const int n = [] {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 ? int(hw) : 1;
  }();
  return n;
}

DType parse_dtype(const std::string& s) {
  if (s == "float32") return DType::kFloat32;
  if (s == "float64") return DType::kFloat64;
  if (s == "float16") return DType::kFloat16;
  if (s == "bfloat16") return DType::kBFloat16;
  throw py::type_error("dtype: expected float16, bfloat16, float32 or float64, got " + s);
}

Accum parse_accum(const std::string& s) {
  if (s.empty() || s == "default") return Accum::kDefault;
  if (s == "float16") return Accum::kFloat16;
  throw py::value_error("accumulation: expected None or 'float16' here, got '" + s + "'");
}

Layout parse_layout(const std::string& s) {
  if (s == "NHWC") return Layout::kNHWC;
  if (s == "NCHW") return Layout::kNCHW;
  throw py::value_error("data_format: expected 'NHWC' or 'NCHW', got '" + s + "'");
}

Padding parse_padding(const std::string& s) {
  if (s == "VALID") return Padding::kValid;
  if (s == "SAME") return Padding::kSame;
  if (s == "EXPLICIT") return Padding::kExplicit;
  throw py::value_error("padding: expected 'SAME', 'VALID' or explicit pairs, got '" + s + "'");
}

// Sizes, padding mode and explicit pads -> a finalized problem (ValueError naming the argument otherwise).
ConvProblem make_problem(i64 N, i64 H, i64 W, i64 C, i64 KH, i64 KW, i64 Cg, i64 Co, i64 sh, i64 sw, i64 dh, i64 dw,
                         const std::string& padding, i64 pt, i64 pb, i64 pl, i64 pr, const std::string& layout,
                         const std::string& dtype, const std::string& accum, i64 D, i64 KD, i64 sd, i64 dd, i64 pf,
                         i64 pk) {
  ConvProblem p;
  p.N = N; p.H = H; p.W = W; p.C = C;
  p.D = D; p.KD = KD; p.sd = sd; p.dd = dd; p.pf = pf; p.pk = pk;
  p.KH = KH; p.KW = KW; p.Cg = Cg; p.Co = Co;
  p.sh = sh; p.sw = sw; p.dh = dh; p.dw = dw;
  p.pt = pt; p.pb = pb; p.pl = pl; p.pr = pr;
  p.layout = parse_layout(layout);
  p.dtype = parse_dtype(dtype);
  p.accum = parse_accum(accum);
  const std::string err = finalize_problem(p, parse_padding(padding));
  if (!err.empty()) throw py::value_error(err);
  return p;
}

template <class T>
const void* cptr(T v) { return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(v)); }
template <class T>
void* mptr(T v) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v)); }

void gpu_check(const char* err) {
  if (err != nullptr) throw std::runtime_error(err);
}

CpuIsa parse_isa(const std::string& s) {
  if (s == "auto") return CpuIsa::kAuto;
  if (s == "scalar") return CpuIsa::kScalar;
  if (s == "avx2") return CpuIsa::kAvx2;
  if (s == "avx512") return CpuIsa::kAvx512;
  throw py::value_error("isa: expected 'auto', 'scalar', 'avx2' or 'avx512', got '" + s + "'");
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "detconv raw kernels (CPU and CUDA) on raw pointers; use detconv.kernels instead.";
  m.attr("ORDER_VERSION") = kOrderVersion;

  py::class_<ConvProblem>(m, "Problem")
      .def(py::init(&make_problem), py::arg("N"), py::arg("H"), py::arg("W"), py::arg("C"), py::arg("KH"),
           py::arg("KW"), py::arg("Cg"), py::arg("Co"), py::arg("sh"), py::arg("sw"), py::arg("dh"), py::arg("dw"),
           py::arg("padding"), py::arg("pt") = 0, py::arg("pb") = 0, py::arg("pl") = 0, py::arg("pr") = 0,
           py::arg("layout") = "NHWC", py::arg("dtype") = "float32", py::arg("accum") = "", py::arg("D") = 1,
           py::arg("KD") = 1, py::arg("sd") = 1, py::arg("dd") = 1, py::arg("pf") = 0, py::arg("pk") = 0)
      .def_readonly("N", &ConvProblem::N)
      .def_readonly("D", &ConvProblem::D)
      .def_readonly("KD", &ConvProblem::KD)
      .def_readonly("OD", &ConvProblem::OD)
      .def_readonly("H", &ConvProblem::H)
      .def_readonly("W", &ConvProblem::W)
      .def_readonly("C", &ConvProblem::C)
      .def_readonly("KH", &ConvProblem::KH)
      .def_readonly("KW", &ConvProblem::KW)
      .def_readonly("Cg", &ConvProblem::Cg)
      .def_readonly("Co", &ConvProblem::Co)
      .def_readonly("G", &ConvProblem::G)
      .def_readonly("OH", &ConvProblem::OH)
      .def_readonly("OW", &ConvProblem::OW)
      .def_property_readonly("padding", [](const ConvProblem& p) { return py::make_tuple(p.pt, p.pb, p.pl, p.pr); })
      .def_property_readonly("depth_padding", [](const ConvProblem& p) { return py::make_tuple(p.pf, p.pk); })
      .def_property_readonly("wgrad_chunks", [](const ConvProblem& p) {
        const Chunks c = reduction_chunks(p.R(), p.filter_elems());
        return py::make_tuple(c.P, c.L);
      })
      .def_property_readonly("wgrad_gpu_workspace_bytes",
                             [](const ConvProblem& p) { return wgrad_gpu_workspace_bytes(p); })
      .def_property_readonly("bgrad_gpu_workspace_bytes",
                             [](const ConvProblem& p) { return bgrad_gpu_workspace_bytes(p); })
      .def("__repr__", [](const ConvProblem& p) {
        return "Problem(N=" + std::to_string(p.N) + ", H=" + std::to_string(p.H) + ", W=" + std::to_string(p.W) +
               ", C=" + std::to_string(p.C) + ", K=" + std::to_string(p.KH) + "x" + std::to_string(p.KW) +
               ", Cg=" + std::to_string(p.Cg) + ", Co=" + std::to_string(p.Co) + ", OH=" + std::to_string(p.OH) +
               ", OW=" + std::to_string(p.OW) + ", " + dtype_name(p.dtype) + ")";
      });

  // ------------------------------------------------------------------ CPU
  m.def("default_threads", &default_threads);
  m.def(
      "fprop_cpu",
      [](const ConvProblem& p, std::uintptr_t x, std::uintptr_t f, std::uintptr_t bias, std::uintptr_t y,
         int threads) {
        py::gil_scoped_release nogil;
        fprop_cpu(p, cptr(x), cptr(f), bias ? cptr(bias) : nullptr, mptr(y),
                  ThreadExecutor(threads > 0 ? threads : default_threads()));
      },
      py::arg("problem"), py::arg("x"), py::arg("f"), py::arg("bias"), py::arg("y"), py::arg("threads") = 0);
  m.def(
      "dgrad_cpu",
      [](const ConvProblem& p, std::uintptr_t dy, std::uintptr_t f, std::uintptr_t dx, int threads) {
        py::gil_scoped_release nogil;
        dgrad_cpu(p, cptr(dy), cptr(f), mptr(dx), ThreadExecutor(threads > 0 ? threads : default_threads()));
      },
      py::arg("problem"), py::arg("dy"), py::arg("f"), py::arg("dx"), py::arg("threads") = 0);
  m.def(
      "wgrad_cpu",
      [](const ConvProblem& p, std::uintptr_t x, std::uintptr_t dy, std::uintptr_t dw, int threads) {
        py::gil_scoped_release nogil;
        wgrad_cpu(p, cptr(x), cptr(dy), mptr(dw), ThreadExecutor(threads > 0 ? threads : default_threads()));
      },
      py::arg("problem"), py::arg("x"), py::arg("dy"), py::arg("dw"), py::arg("threads") = 0);
  m.def(
      "bgrad_cpu",
      [](const ConvProblem& p, std::uintptr_t dy, std::uintptr_t db, int threads) {
        py::gil_scoped_release nogil;
        bgrad_cpu(p, cptr(dy), mptr(db), ThreadExecutor(threads > 0 ? threads : default_threads()));
      },
      py::arg("problem"), py::arg("dy"), py::arg("db"), py::arg("threads") = 0);

  m.def("cpu_isa", []() { return std::string(cpu_isa_name(cpu_isa_active())); });
  m.def("cpu_isa_supported", [](const std::string& s) { return cpu_isa_supported(parse_isa(s)); });
  m.def("cpu_isa_force", [](const std::string& s) { return cpu_isa_force(parse_isa(s)); });

  // ------------------------------------------------------------------ GPU
  m.def("gpu_built", &gpu_built);
  m.def("cuda_device_count", []() {
#if defined(DETCONV_MODULE_CUDA)
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the (non-sticky) "no driver / no device" error
      return 0;
    }
    return n;
#elif defined(DETCONV_CUDA_EMULATION)
    return 1;  // tests/gpu/emu: the "device" is the host emulator
#else
    return 0;
#endif
  });
  m.def(
      "fprop_gpu",
      [](const ConvProblem& p, std::uintptr_t x, std::uintptr_t f, std::uintptr_t bias, std::uintptr_t y,
         std::uintptr_t stream) {
        const char* err;
        {
          py::gil_scoped_release nogil;
          err = fprop_gpu(p, cptr(x), cptr(f), bias ? cptr(bias) : nullptr, mptr(y), mptr(stream));
        }
        gpu_check(err);
      },
      py::arg("problem"), py::arg("x"), py::arg("f"), py::arg("bias"), py::arg("y"), py::arg("stream"));
  m.def(
      "dgrad_gpu",
      [](const ConvProblem& p, std::uintptr_t dy, std::uintptr_t f, std::uintptr_t dx, std::uintptr_t stream) {
        const char* err;
        {
          py::gil_scoped_release nogil;
          err = dgrad_gpu(p, cptr(dy), cptr(f), mptr(dx), mptr(stream));
        }
        gpu_check(err);
      },
      py::arg("problem"), py::arg("dy"), py::arg("f"), py::arg("dx"), py::arg("stream"));
  m.def(
      "wgrad_gpu",
      [](const ConvProblem& p, std::uintptr_t x, std::uintptr_t dy, std::uintptr_t dw, std::uintptr_t ws,
         std::uintptr_t stream) {
        const char* err;
        {
          py::gil_scoped_release nogil;
          err = wgrad_gpu(p, cptr(x), cptr(dy), mptr(dw), mptr(ws), mptr(stream));
        }
        gpu_check(err);
      },
      py::arg("problem"), py::arg("x"), py::arg("dy"), py::arg("dw"), py::arg("workspace"), py::arg("stream"));
  m.def(
      "bgrad_gpu",
      [](const ConvProblem& p, std::uintptr_t dy, std::uintptr_t db, std::uintptr_t ws, std::uintptr_t stream) {
        const char* err;
        {
          py::gil_scoped_release nogil;
          err = bgrad_gpu(p, cptr(dy), mptr(db), mptr(ws), mptr(stream));
        }
        gpu_check(err);
      },
      py::arg("problem"), py::arg("dy"), py::arg("db"), py::arg("workspace"), py::arg("stream"));
}
