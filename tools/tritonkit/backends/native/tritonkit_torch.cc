// tritonkit's native Triton backend: serves a version's TorchScript program (``model.ts``, one
// method per batch bucket, or per (batch, shape) bucket, written by ``tritonkit.backends.native``'s
// export_program) from Triton's own process. A config naming ``shape_buckets`` is served by bucketed.h.
//
// Why: the python backend costs every request a trip through shared memory and Python objects (60-70 us
// on an H100 host), far below what the GPU does for one-row requests; here a memcpy in and one out.
//
// One execute (fixed shapes): every request's inputs are checked against the config (dtype, shape, byte
// size; a bad request gets its own error response and the rest run), copied into one pinned staging
// buffer per input (over several threads for a large batch when asked), run in chunks padded to the
// smallest bucket that holds them (method ``b<bucket>``, replayed from a CUDA graph captured at load on a
// GPU), copied into pinned output buffers, one wait, then one response per request. Statistics go to
// Triton per request and per batch (``queue``/``compute_*``).
//
// Config it reads: ``max_batch_size`` (> 0), inputs and outputs (fixed dims, or -1 on a shape bucket's
// axis: ``shape_buckets``, ``graph_max_batch``, bucketed.h), instance kind and device,
// ``batch_buckets`` (each a method of the program; default every ``b<N>`` up to the max), ``cuda_graphs``,
// ``copy_threads`` (default 1), ``copy_split_bytes`` (default 1 MiB: a batch's input copy, copy_in.h),
// ``answer_thread`` (default false: answers written on an instance's second thread, answers.h; on a GPU
// that thread also waits for the batch's GPU work, so the instance gathers the next batch meanwhile) and
// ``jit_optimize`` (default false; true: on a GPU, graphs capture TorchScript's optimised plan).
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#ifdef TRITONKIT_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "answers.h"
#include "bucketed.h"
#include "copy_in.h"
#include "mini_json.h"
#include "model_state.h"
#include "program.h"
#include "triton_api.h"

namespace tk {

TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, message.c_str());
}

namespace {

// Triton starts and stops instances on parallel threads (a reload stops the old ones while the new
// start); allocations or teardown while another instance captures fail ("operation not permitted when
// stream is capturing", an H100 with 4 instances), so instances load and stop one at a time.
std::mutex& lifecycle() { static std::mutex one_at_a_time; return one_at_a_time; }

// The shape of ``rows`` rows of ``t`` (its dims after the batch axis).
std::vector<int64_t> shape_of(int64_t rows, const Tensor& t) {
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), t.dims.begin(), t.dims.end());
  return shape;
}

// One instance: its own copy of the program on its device, its graphs and buffers.
class Instance {
 public:
  Instance(ModelState* model, TRITONBACKEND_ModelInstance* triton) : model_(model), triton_(triton) {}
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  ~Instance() {
    outbox_.reset();  // its batches answered (each waits for its GPU work) before the events go
#ifdef TRITONKIT_CUDA
    for (cudaEvent_t event : done_) cudaEventDestroy(event);
#endif
  }

  TRITONSERVER_Error* init() {
    TRITONSERVER_InstanceGroupKind kind;
    int32_t device_id = 0;
    TRITONBACKEND_ModelInstanceKind(triton_, &kind);
    TRITONBACKEND_ModelInstanceDeviceId(triton_, &device_id);
    on_gpu_ = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU;
#ifndef TRITONKIT_CUDA
    if (on_gpu_) {
      return error(TRITONSERVER_ERROR_UNSUPPORTED, "this tritonkit_torch build has no CUDA; use KIND_CPU instances");
    }
#endif
    device_ = on_gpu_ ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_id)) : c10::Device(c10::kCPU);
    std::lock_guard<std::mutex> one_at_a_time(lifecycle());
    try {
      c10::InferenceMode guard;
      // With ``jit_optimize`` on a GPU the graphs capture the program's optimised plan (TorchScript's
      // profiling executor: elementwise ops fused, as `torch.jit.load` in Python runs it; ResNet-50's lone
      // row ~0.15 ms sooner on an H100), at the price of compiling the fused kernels at load. Otherwise,
      // and always on a CPU, the plain plan (no profiling runs at load).
      torch::jit::setGraphExecutorOptimize(on_gpu_ && model_->jit_optimize);
      module_ = torch::jit::load(model_->version_dir + "/model.ts", device_);
      module_.eval();
      if (model_->shapes) {
        bucketed_ = std::make_unique<Bucketed>(model_, triton_, &module_, device_);
        bucketed_->load();
      } else {
        resolve_buckets();
        allocate();
        prepare();
      }
    } catch (const std::exception& e) {
      return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("tritonkit_torch: ") + first_line(e.what()));
    }
    return nullptr;
  }

  void execute(TRITONBACKEND_Request** requests, uint32_t count);
  bool on_gpu() const { return on_gpu_; }

 private:
  // One execute's requests, what became of each and where its outputs are (``slot`` of host_out_).
  struct Batch {
    std::vector<TRITONBACKEND_Request*> requests;
    std::vector<int64_t> rows, offsets;
    std::vector<TRITONSERVER_Error*> failures;
    TRITONSERVER_Error* run_failure = nullptr;
    int64_t total = 0;
    uint64_t exec_start = 0, compute_start = 0, compute_end = 0;
    size_t slot = 0;
  };

  struct Bucket {
    int64_t rows;
    torch::jit::Method* method = nullptr;
    std::vector<at::Tensor> static_in, static_out;
#ifdef TRITONKIT_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  };

  // The batch buckets up to max_batch_size (batch_sizes' rule), each a method b<N>.
  void resolve_buckets() {
    for (int64_t b : batch_sizes(model_->buckets, model_->max_batch_size)) {
      auto method = module_.find_method("b" + std::to_string(b));
      if (!method) {
        throw std::runtime_error("model.ts has no method b" + std::to_string(b) + " for bucket " + std::to_string(b) +
                                 "; rebuild the version or choose buckets it was exported with");
      }
      buckets_.push_back(Bucket{b});
      methods_.push_back(std::make_unique<torch::jit::Method>(*method));
      buckets_.back().method = methods_.back().get();
    }
  }

  // Pinned staging and output buffers per slot: with the answer thread, two (a batch is gathered and
  // run into one while the other's is computed or answered), and on a GPU one event per slot, recorded
  // after the slot's batch is enqueued, that the answer thread waits on.
  void allocate() {
    const int64_t top = buckets_.back().rows;
    auto host = at::TensorOptions().device(c10::kCPU).pinned_memory(on_gpu_);
    const size_t slots = model_->answer_thread ? 2 : 1;
    auto buffers = [&](const std::vector<Tensor>& tensors) {
      std::vector<at::Tensor> made;
      for (const Tensor& t : tensors) made.push_back(at::empty(shape_of(top, t), host.dtype(t.dtype.torch)));
      return made;
    };
    for (size_t s = 0; s < slots; ++s) {
      staging_.push_back(buffers(model_->inputs));
      host_out_.push_back(buffers(model_->outputs));
    }
#ifdef TRITONKIT_CUDA
    if (on_gpu_ && model_->answer_thread) {
      for (size_t s = 0; s < slots; ++s) {
        cudaEvent_t event = nullptr;
        if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
          throw std::runtime_error("creating a CUDA event failed");
        }
        done_.push_back(event);
      }
    }
#endif
    if (model_->answer_thread) {
      outbox_ = std::make_unique<Outbox<Batch>>(slots, [this](Batch& batch) { answer(batch); });
    }
  }

  std::vector<at::Tensor> call(Bucket& b, const std::vector<at::Tensor>& in) {
    return call_program(*b.method, in, model_->outputs);
  }

  // Static inputs per bucket; on a GPU with graphs, one capture per bucket (after its warm-up runs).
  void prepare() {
    for (Bucket& b : buckets_) {
      for (const Tensor& t : model_->inputs) {
        b.static_in.push_back(at::zeros(shape_of(b.rows, t), at::TensorOptions().device(device_).dtype(t.dtype.torch)));
      }
    }
#ifdef TRITONKIT_CUDA
    if (on_gpu_) {
      c10::cuda::CUDAGuard device_guard(device_);
      stream_ = std::make_unique<c10::cuda::CUDAStream>(c10::cuda::getStreamFromPool(false, device_.index()));
      c10::cuda::CUDAStreamGuard stream_guard(*stream_);
      c10::InferenceMode mode;
      for (Bucket& b : buckets_) {
        // warm-up: lazy initialisations happen outside the capture; with the optimiser, the first run
        // profiles and the second builds the optimised plan (its fused kernels compiled), so the third
        // and the capture run that plan
        for (int run = 0; run < (torch::jit::getGraphExecutorOptimize() ? 3 : 1); ++run) call(b, b.static_in);
        stream_->synchronize();
        if (model_->cuda_graphs) {
          b.graph = std::make_unique<at::cuda::CUDAGraph>();
          // Thread-local capture: other instances keep serving (and Triton keeps allocating) while
          // this one captures; a global capture would fail their CUDA calls.
          b.graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
          b.static_out = call(b, b.static_in);
          b.graph->capture_end();
        }
      }
      stream_->synchronize();
    }
#endif
  }

  // Outputs of ``piece`` rows (staged at ``start`` in ``in``) run as bucket ``b``, written into ``out``.
  void run_chunk(Bucket& b, const std::vector<at::Tensor>& in, int64_t start, int64_t piece, std::vector<at::Tensor>& out) {
    for (size_t i = 0; i < b.static_in.size(); ++i) {
      b.static_in[i].narrow(0, 0, piece).copy_(in[i].narrow(0, start, piece), /*non_blocking=*/on_gpu_);
    }
    std::vector<at::Tensor> outs;
#ifdef TRITONKIT_CUDA
    if (b.graph) {
      b.graph->replay();
      outs = b.static_out;
    } else {
      outs = call(b, b.static_in);
    }
#else
    outs = call(b, b.static_in);
#endif
    for (size_t o = 0; o < outs.size(); ++o) {
      out[o].narrow(0, start, piece).copy_(outs[o].narrow(0, 0, piece), /*non_blocking=*/on_gpu_);
    }
  }

  // Runs slot ``slot``'s ``rows`` into its output buffers. On a GPU: waits for the work, or with the
  // answer thread only enqueues it and records the slot's event (the answer thread waits on it).
  void run(int64_t rows, size_t slot) {
    std::vector<at::Tensor>& out = host_out_[slot];
    c10::InferenceMode mode;
#ifdef TRITONKIT_CUDA
    std::unique_ptr<c10::cuda::CUDAStreamGuard> guard;
    if (on_gpu_) guard = std::make_unique<c10::cuda::CUDAStreamGuard>(*stream_);
#endif
    const int64_t top = buckets_.back().rows;
    int64_t start = 0;
    while (start < rows) {
      int64_t piece = std::min(top, rows - start);
      Bucket* chosen = &buckets_.back();
      for (Bucket& b : buckets_) {
        if (b.rows >= piece) {
          chosen = &b;
          break;
        }
      }
      run_chunk(*chosen, staging_[slot], start, piece, out);
      start += piece;
    }
#ifdef TRITONKIT_CUDA
    if (!done_.empty()) {
      if (cudaEventRecord(done_[slot], stream_->stream()) != cudaSuccess) throw std::runtime_error("recording a CUDA event failed");
    } else if (on_gpu_) {
      stream_->synchronize();
    }
#endif
  }

  // After a failed run: whatever it enqueued is finished before its slot's buffers are used again.
  void drain() noexcept {
#ifdef TRITONKIT_CUDA
    if (on_gpu_ && stream_) cudaStreamSynchronize(stream_->stream());
#endif
  }

  // The answer thread's wait for a pipelined batch's GPU work (nullptr: done, or nothing to wait for).
  TRITONSERVER_Error* await(const Batch& batch) {
#ifdef TRITONKIT_CUDA
    if (!done_.empty() && batch.total > 0 && batch.run_failure == nullptr) {
      const cudaError_t status = cudaEventSynchronize(done_[batch.slot]);
      if (status != cudaSuccess) {
        return error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: the batch's GPU work failed: ") + cudaGetErrorString(status));
      }
    }
#endif
    (void)batch;
    return nullptr;
  }

  TRITONSERVER_Error* gather(TRITONBACKEND_Request* request, size_t slot, int64_t offset, int64_t* rows,
                             std::vector<CopyJob>* jobs);
  void answer(Batch& batch);

  ModelState* model_;
  TRITONBACKEND_ModelInstance* triton_;
  bool on_gpu_ = false;
  c10::Device device_{c10::kCPU};
  torch::jit::Module module_;
  std::vector<std::unique_ptr<torch::jit::Method>> methods_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<at::Tensor>> staging_, host_out_;  // per slot
#ifdef TRITONKIT_CUDA
  std::unique_ptr<c10::cuda::CUDAStream> stream_;
  std::vector<cudaEvent_t> done_;  // per slot, with the answer thread on a GPU
#endif
  std::unique_ptr<Outbox<Batch>> outbox_;  // last: stopped (its batches answered) before the rest goes
  std::unique_ptr<Bucketed> bucketed_;     // with shape buckets: the execute and everything it holds
};

// Checks one request's inputs and plans their copy into the staging buffers at row ``offset`` (added to
// ``jobs`` only when every input is right; an input in GPU memory is copied here).
TRITONSERVER_Error* Instance::gather(TRITONBACKEND_Request* request, size_t slot, int64_t offset, int64_t* rows,
                                     std::vector<CopyJob>* jobs) {
  *rows = -1;
  std::vector<CopyJob> planned;
  const int64_t capacity = buckets_.back().rows;
  for (size_t i = 0; i < model_->inputs.size(); ++i) {
    const Tensor& spec = model_->inputs[i];
    RequestInput in;  // a fixed-shape model's dims are all fixed: read_input compares each
    if (auto* err = read_input(request, spec, &in)) return err;
    TRITONBACKEND_Input* input = in.input;
    const int64_t* shape = in.shape;
    const uint32_t buffers = in.buffers;
    const uint64_t bytes = in.bytes;
    if (*rows < 0) *rows = shape[0];
    if (shape[0] != *rows) {
      return error(TRITONSERVER_ERROR_INVALID_ARG, "inputs disagree on the batch size");
    }
    if (offset + *rows > capacity) {
      return error(TRITONSERVER_ERROR_INVALID_ARG, "the batch exceeds max_batch_size " + std::to_string(capacity));
    }
    if (bytes != static_cast<uint64_t>(*rows) * spec.row_bytes) {
      return error(TRITONSERVER_ERROR_INVALID_ARG, "input `" + spec.name + "` holds " + std::to_string(bytes) +
                                                       " bytes; its shape needs " +
                                                       std::to_string(static_cast<uint64_t>(*rows) * spec.row_bytes));
    }
    char* dst = static_cast<char*>(staging_[slot][i].data_ptr()) + static_cast<size_t>(offset) * spec.row_bytes;
    uint64_t copied = 0;
    for (uint32_t k = 0; k < buffers; ++k) {
      const void* src = nullptr;
      uint64_t size = 0;
      TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
      int64_t type_id = 0;
      if (auto* err = TRITONBACKEND_InputBuffer(input, k, &src, &size, &type, &type_id)) return err;
      if (copied + size > bytes) return error(TRITONSERVER_ERROR_INVALID_ARG, "input buffers exceed the input's size");
      if (type == TRITONSERVER_MEMORY_GPU) {
#ifdef TRITONKIT_CUDA
        if (cudaMemcpy(dst + copied, src, size, cudaMemcpyDefault) != cudaSuccess) {
          return error(TRITONSERVER_ERROR_INTERNAL, "copying input `" + spec.name + "` from GPU memory failed");
        }
#else
        return error(TRITONSERVER_ERROR_UNSUPPORTED, "input in GPU memory; this build has no CUDA");
#endif
      } else {
        planned.push_back(CopyJob{dst + copied, static_cast<const char*>(src), size});
      }
      copied += size;
    }
  }
  jobs->insert(jobs->end(), planned.begin(), planned.end());
  return nullptr;
}

void Instance::execute(TRITONBACKEND_Request** requests, uint32_t count) {
  if (bucketed_) {
    bucketed_->execute(requests, count);
    return;
  }
  Batch batch;
  batch.exec_start = now_ns();
  batch.requests.assign(requests, requests + count);
  batch.rows.assign(count, 0);
  batch.offsets.assign(count, 0);
  batch.failures.assign(count, nullptr);
  // With the answer thread, a slot whose last batch is answered (its GPU work done): this wait, when
  // both slots are still in flight, counts as the batch's input time.
  batch.slot = outbox_ ? outbox_->take_slot() : 0;
  std::vector<CopyJob> jobs;
  for (uint32_t r = 0; r < count; ++r) {
    batch.offsets[r] = batch.total;
    try {
      batch.failures[r] = gather(requests[r], batch.slot, batch.total, &batch.rows[r], &jobs);
    } catch (const std::exception& e) {
      batch.failures[r] = error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: ") + first_line(e.what()));
    }
    if (batch.failures[r] == nullptr) batch.total += batch.rows[r];
  }
  try {
    copy_all(jobs, static_cast<unsigned>(model_->copy_threads), static_cast<uint64_t>(model_->copy_split_bytes));
  } catch (const std::exception& e) {
    batch.run_failure = error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: ") + e.what());
  }
  batch.compute_start = now_ns();
  if (batch.total > 0 && batch.run_failure == nullptr) {
    try {
      run(batch.total, batch.slot);
    } catch (const std::exception& e) {
      batch.run_failure = error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: ") + first_line(e.what()));
      drain();
    }
  }
  batch.compute_end = now_ns();
  // A lone request while nothing is in flight is answered here: no load to overlap with, and a
  // hand-over would add the answer thread's wake-up to its latency. Any other batch is answered (its
  // GPU work waited for) on the answer thread while this one gathers the next.
  const bool lone = count == 1 && outbox_ && outbox_->idle();
  if (outbox_ && !lone) {
    outbox_->post(std::move(batch));
  } else {
    answer(batch);
    if (outbox_) outbox_->release(batch.slot);
  }
}

// One response per request of ``batch`` (its rows, or its failure), its statistics, its release.
void Instance::answer(Batch& batch) {
  if (TRITONSERVER_Error* failed = await(batch)) {
    batch.run_failure = failed;
    drain();
  }
#ifdef TRITONKIT_CUDA
  if (!done_.empty()) batch.compute_end = now_ns();  // pipelined: the compute ends when the GPU's work does
#endif
  const std::vector<at::Tensor>& out = host_out_[batch.slot];
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    TRITONBACKEND_Response* response = nullptr;
    TRITONSERVER_Error* failure = batch.failures[r];
    if (failure == nullptr && batch.run_failure != nullptr) {
      failure = error(TRITONSERVER_ERROR_INTERNAL, TRITONSERVER_ErrorMessage(batch.run_failure));
    }
    if (TRITONBACKEND_ResponseNew(&response, batch.requests[r]) == nullptr) {
      for (size_t o = 0; failure == nullptr && o < model_->outputs.size(); ++o) {
        const Tensor& spec = model_->outputs[o];
        const std::vector<int64_t> shape = shape_of(batch.rows[r], spec);
        TRITONBACKEND_Output* output = nullptr;
        failure = TRITONBACKEND_ResponseOutput(response, &output, spec.name.c_str(), spec.dtype.triton, shape.data(),
                                               static_cast<uint32_t>(shape.size()));
        if (failure != nullptr) break;
        const uint64_t bytes = static_cast<uint64_t>(batch.rows[r]) * spec.row_bytes;
        void* buffer = nullptr;
        TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
        int64_t type_id = 0;
        failure = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &type, &type_id);
        if (failure != nullptr) break;
        const char* src = static_cast<const char*>(out[o].data_ptr()) + static_cast<size_t>(batch.offsets[r]) * spec.row_bytes;
        if (type == TRITONSERVER_MEMORY_GPU) {
#ifdef TRITONKIT_CUDA
          cudaMemcpy(buffer, src, bytes, cudaMemcpyDefault);
#else
          failure = error(TRITONSERVER_ERROR_UNSUPPORTED, "output buffer in GPU memory; this build has no CUDA");
#endif
        } else {
          std::memcpy(buffer, src, bytes);
        }
      }
      TRITONBACKEND_ResponseSend(response, kResponseCompleteFinal, failure);
    }
    TRITONBACKEND_ModelInstanceReportStatistics(triton_, batch.requests[r], failure == nullptr, batch.exec_start,
                                                batch.compute_start, batch.compute_end, now_ns());
    if (failure != nullptr) TRITONSERVER_ErrorDelete(failure);
    TRITONBACKEND_RequestRelease(batch.requests[r], kRequestReleaseAll);
  }
  if (batch.run_failure != nullptr) TRITONSERVER_ErrorDelete(batch.run_failure);
  if (batch.total > 0) {
    TRITONBACKEND_ModelInstanceReportBatchStatistics(triton_, static_cast<uint64_t>(batch.total), batch.exec_start,
                                                     batch.compute_start, batch.compute_end, now_ns());
  }
}

// Every instance stops here, loaded or failed: under lifecycle(), then its graphs' memory goes back to
// the driver. Left reserved in PyTorch's caching allocator, it is freed (cudaFree) by the next allocation
// that fails, which inside a capture is forbidden (an H100 tune's loads failed after ~20 reloads).
void destroy(Instance* instance) {
  std::lock_guard<std::mutex> one_at_a_time(lifecycle());
  [[maybe_unused]] const bool on_gpu = instance != nullptr && instance->on_gpu();
  delete instance;
#ifdef TRITONKIT_CUDA
  if (on_gpu) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}
using Owned = std::unique_ptr<Instance, void (*)(Instance*)>;

}  // namespace
}  // namespace tk

extern "C" {

// No C++ exception may cross into Triton: each entry point turns one into an error.
#define TK_GUARD(body)                                                                        \
  try {                                                                                       \
    body                                                                                      \
  } catch (const std::exception& e) {                                                         \
    return tk::error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: ") + e.what()); \
  } catch (...) {                                                                             \
    return tk::error(TRITONSERVER_ERROR_INTERNAL, "tritonkit_torch: unknown failure");       \
  }

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TK_GUARD({
    auto state = std::make_unique<tk::ModelState>();
    if (auto* err = tk::load_model_state(model, state.get())) return err;
    TRITONBACKEND_ModelSetState(model, state.release());
    return nullptr;
  })
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  TK_GUARD({
    void* state = nullptr;
    TRITONBACKEND_ModelState(model, &state);
    delete static_cast<tk::ModelState*>(state);
    return nullptr;
  })
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(
    TRITONBACKEND_ModelInstance* instance) {
  TK_GUARD({
    TRITONBACKEND_Model* model = nullptr;
    TRITONBACKEND_ModelInstanceModel(instance, &model);
    void* state = nullptr;
    TRITONBACKEND_ModelState(model, &state);
    tk::Owned created(new tk::Instance(static_cast<tk::ModelState*>(state), instance), tk::destroy);
    if (auto* err = created->init()) return err;
    TRITONBACKEND_ModelInstanceSetState(instance, created.release());
    return nullptr;
  })
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(
    TRITONBACKEND_ModelInstance* instance) {
  TK_GUARD({
    void* state = nullptr;
    TRITONBACKEND_ModelInstanceState(instance, &state);
    tk::destroy(static_cast<tk::Instance*>(state));
    return nullptr;
  })
}

// Execute answers and releases every request itself (an error becomes that request's response), so
// it always returns success: returning an error would hand back requests already released.
__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  void* state = nullptr;
  TRITONBACKEND_ModelInstanceState(instance, &state);
  static_cast<tk::Instance*>(state)->execute(requests, request_count);
  return nullptr;
}

}  // extern "C"
