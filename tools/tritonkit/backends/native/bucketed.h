// tritonkit_torch's execute for a model with shape buckets (config parameter ``shape_buckets``: a dynamic
// non-batch axis such as a text model's sequence length; with ``allow_ragged_batch`` on its inputs
// Triton's batcher hands requests of mixed lengths to one execute). The python runners' BucketedPath
// (backends/runners/gpu_requests.py) is the reference behaviour, and this is it in Triton's process:
//   * at load: one traced method per (batch bucket, shape bucket), ``b<N>_s<edges>``, each with its
//     static inputs; on a GPU each replayed from a CUDA graph captured here (the graphs share one memory
//     pool, replayed one at a time on the instance's stream); each method timed, the cost table the
//     grouping reads; one log line names the methods, the graphs' device memory and the table;
//   * per execute: each request's inputs checked and its length per axis read (above the last edge it is
//     refused alone, with shape_buckets.TooLongError's line), the requests grouped by bucket
//     (plan_groups on the timed table: a group padded up into a longer one where that is cheaper), each
//     group's rows staged padded with its inputs' pad values and run in chunks of the batch buckets,
//     every output carrying an axis cut back to its request's own length. With --log-verbose each
//     execute logs its requests' (rows, edges) and its groups.
// ``answer_thread`` is read as in the fixed-shape path (answers.h); ``copy_threads`` is not (torch
// copies each request's rows into its padded place).
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifdef TRITONKIT_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "answers.h"
#include "model_state.h"
#include "program.h"
#include "shape_buckets.h"
#include "tensor_io.h"
#include "triton_api.h"

namespace tk {
namespace {

// ms a launch costs beside its work in the cost table (gpu_requests.BucketedPath.load_buckets' 0.02)
constexpr double kLaunchMs = 0.02;

class Bucketed {
 public:
  Bucketed(ModelState* model, TRITONBACKEND_ModelInstance* triton, torch::jit::Module* module, c10::Device device)
      : model_(model), shapes_(*model->shapes), triton_(triton), module_(module), device_(device),
        on_gpu_(device.is_cuda()) {}
  Bucketed(const Bucketed&) = delete;
  Bucketed& operator=(const Bucketed&) = delete;
  ~Bucketed() {
    outbox_.reset();  // its batches answered before the events go
#ifdef TRITONKIT_CUDA
    for (cudaEvent_t event : done_) cudaEventDestroy(event);
#endif
  }

  // Finds every (batch bucket, shape bucket) method, warms, captures and times each; logs one line.
  void load() {
    const int64_t top = model_->graph_max_batch > 0 ? model_->graph_max_batch : model_->max_batch_size;
    sizes_ = batch_sizes(model_->buckets, top);
    std::vector<Edges> combos{{}};
    for (const ShapeBuckets::Axis& axis : shapes_.axes) {
      std::vector<Edges> next;
      for (const Edges& combo : combos) {
        for (int64_t edge : axis.edges) {
          next.push_back(combo);
          next.back().push_back(edge);
        }
      }
      combos = next;
    }
    for (int64_t rows : sizes_) {
      for (const Edges& edges : combos) {
        const std::string name = method_name(rows, edges);
        auto found = module_->find_method(name);
        if (!found) {
          throw std::runtime_error("model.ts has no method " + name + " for batch bucket " + std::to_string(rows) +
                                   " and shape bucket " + shape_text(edges.data(), edges.size()) +
                                   "; rebuild the version or choose buckets it was exported with");
        }
        auto method = std::make_unique<Method>();
        method->rows = rows;
        method->edges = edges;
        method->method = std::make_unique<torch::jit::Method>(*found);
        for (const Tensor& t : model_->inputs) {
          method->static_in.push_back(at::zeros(with_rows(rows, padded(t, shapes_.input(t.name), edges)),
                                                at::TensorOptions().device(device_).dtype(t.dtype.torch)));
        }
        index_[{rows, edges}] = methods_.size();
        methods_.push_back(std::move(method));
      }
    }
    const std::string memory = prepare();
    if (model_->answer_thread) {
#ifdef TRITONKIT_CUDA
      for (size_t s = 0; on_gpu_ && s < 2; ++s) {
        cudaEvent_t event = nullptr;
        if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
          throw std::runtime_error("creating a CUDA event failed");
        }
        done_.push_back(event);
      }
#endif
      outbox_ = std::make_unique<Outbox<Batch>>(2, [this](Batch& batch) { answer(batch); });
    }
    std::string table;
    for (const auto& m : methods_) {
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.4f", m->ms);
      table += (table.empty() ? "" : ", ") + std::to_string(m->rows) + "x" + shape_text(m->edges.data(), m->edges.size()) + " " + ms;
    }
    log_line(TRITONSERVER_LOG_INFO, "tritonkit_torch: " + model_->name + " on " + device_.str() + ": " +
                                        std::to_string(methods_.size()) + " methods for " + std::to_string(sizes_.size()) +
                                        " batch x " + std::to_string(combos.size()) + " shape buckets" + memory +
                                        "; cost ms by (batch, edges): " + table);
  }

  void execute(TRITONBACKEND_Request** requests, uint32_t count) {
    Batch batch;
    batch.exec_start = now_ns();
    batch.requests.assign(requests, requests + count);
    batch.failures.assign(count, nullptr);
    batch.outs.assign(count, {});
    batch.slot = outbox_ ? outbox_->take_slot() : 0;
    std::vector<Member> members;
    int64_t taken = 0;
    for (uint32_t r = 0; r < count; ++r) {
      Member member;
      member.request = r;
      TRITONSERVER_Error* failed = nullptr;
      try {
        failed = read(requests[r], taken, &member);
      } catch (const std::exception& e) {
        failed = error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: ") + first_line(e.what()));
      }
      if (failed != nullptr) {
        batch.failures[r] = failed;
      } else {
        taken += member.rows;
        members.push_back(std::move(member));
      }
    }
    std::vector<std::pair<int64_t, Edges>> keyed;
    for (const Member& m : members) keyed.emplace_back(m.rows, m.edges);
    const Groups groups = plan_groups(keyed, [this](int64_t rows, const Edges& edges) { return cost(rows, edges); });
    if (TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE)) log_line(TRITONSERVER_LOG_VERBOSE, describe(keyed, groups));
    batch.compute_start = now_ns();
    {
      c10::InferenceMode mode;
#ifdef TRITONKIT_CUDA
      std::unique_ptr<c10::cuda::CUDAStreamGuard> guard;
      if (on_gpu_) guard = std::make_unique<c10::cuda::CUDAStreamGuard>(*stream_);
#endif
      for (const auto& group : groups) {
        try {
          run_group(group.first, group.second, members, batch);
        } catch (const std::exception& e) {
          drain();
          fail(batch, members, group.second, first_line(e.what()));
        }
      }
#ifdef TRITONKIT_CUDA
      if (!done_.empty()) {
        if (cudaEventRecord(done_[batch.slot], stream_->stream()) != cudaSuccess) {
          std::vector<size_t> all(members.size());
          for (size_t p = 0; p < all.size(); ++p) all[p] = p;
          drain();
          fail(batch, members, all, "recording a CUDA event failed");
        }
      } else if (on_gpu_) {
        stream_->synchronize();
      }
#endif
    }
    batch.compute_end = now_ns();
    const bool lone = count == 1 && outbox_ && outbox_->idle();  // as the fixed-shape path: answered here
    if (outbox_ && !lone) {
      outbox_->post(std::move(batch));
    } else {
      answer(batch);
      if (outbox_) outbox_->release(batch.slot);
    }
  }

 private:
  struct Method {
    int64_t rows = 0;
    Edges edges;
    std::unique_ptr<torch::jit::Method> method;
    std::vector<at::Tensor> static_in, static_out;
    double ms = 0;  // one run's time, rounded to 0.1 us (the logged table is the one the grouping reads)
#ifdef TRITONKIT_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  };
  // One request that passed its checks: its rows, length per axis, edges, inputs and their shapes.
  struct Member {
    size_t request = 0;
    int64_t rows = -1;
    std::vector<int64_t> lengths;
    Edges edges;
    std::vector<TRITONBACKEND_Input*> inputs;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::pair<uint64_t, uint32_t>> sizes;  // per input: bytes, buffers
  };
  // One execute: per request its failure or its outputs (host views, cut back to its length).
  struct Batch {
    std::vector<TRITONBACKEND_Request*> requests;
    std::vector<TRITONSERVER_Error*> failures;
    std::vector<std::vector<at::Tensor>> outs;
    int64_t total = 0;
    uint64_t exec_start = 0, compute_start = 0, compute_end = 0;
    size_t slot = 0;
  };

  // ``t``'s dims (no batch axis) with each axis ``carried`` names at its edge in ``edges``.
  static std::vector<int64_t> padded(const Tensor& t, const ShapeBuckets::Carried* carried, const Edges& edges) {
    std::vector<int64_t> dims = t.dims;
    for (size_t a = 0; carried != nullptr && a < carried->axes.size(); ++a) {
      dims[static_cast<size_t>(carried->axes[a].first - 1)] = edges[carried->axes[a].second];
    }
    return dims;
  }
  static std::vector<int64_t> with_rows(int64_t rows, std::vector<int64_t> dims) {
    dims.insert(dims.begin(), rows);
    return dims;
  }

  // (rows, batch bucket) pieces of ``rows``: full chunks of the largest bucket, then the rest padded up
  // to the smallest bucket that holds it (torch_runner.plan_chunks; the fixed-shape path's run()).
  std::vector<std::pair<int64_t, int64_t>> chunks(int64_t rows) const {
    const int64_t top = sizes_.back();
    std::vector<std::pair<int64_t, int64_t>> pieces(static_cast<size_t>(rows / top), {top, top});
    if (rows % top) pieces.emplace_back(rows % top, *std::lower_bound(sizes_.begin(), sizes_.end(), rows % top));
    return pieces;
  }

  // gpu_requests.BucketedPath's cost: each chunk's timed run plus a launch's host work, in ms.
  double cost(int64_t rows, const Edges& edges) const {
    double total = 0.0;
    for (const auto& piece : chunks(rows)) total += methods_[index_.at({piece.second, edges})]->ms + kLaunchMs;
    return total;
  }

  std::vector<at::Tensor> launch(Method& m) {
#ifdef TRITONKIT_CUDA
    if (m.graph) {
      m.graph->replay();
      return m.static_out;
    }
#endif
    return call_program(*m.method, m.static_in, model_->outputs);
  }

  // A method's outputs must be the config's outputs at its edges (else a copy would broadcast them).
  void check_outputs(const Method& m, const std::vector<at::Tensor>& outs) const {
    for (size_t o = 0; o < outs.size(); ++o) {
      const Tensor& spec = model_->outputs[o];
      const std::vector<int64_t> want = with_rows(m.rows, padded(spec, shapes_.output(spec.name), m.edges));
      if (outs[o].sizes().vec() != want) {
        const std::vector<int64_t> got = outs[o].sizes().vec();
        throw std::runtime_error("method " + method_name(m.rows, m.edges) + " returns output `" + spec.name +
                                 "` of shape " + shape_text(got.data(), got.size()) + "; the config and its buckets give " +
                                 shape_text(want.data(), want.size()));
      }
    }
  }

  // Warm-up (and the outputs' check), graphs on a GPU, then every method's time. Returns the log's
  // words on the graphs' memory ("" without graphs).
  std::string prepare() {
    std::string memory;
    if (!on_gpu_) {
      c10::InferenceMode mode;
      for (auto& m : methods_) check_outputs(*m, call_program(*m->method, m->static_in, model_->outputs));
      // Each method's fastest run over up to five passes through them all (at least two; no new pass
      // after 2 s): a loaded host slows some runs, and passes spread each method's runs over time.
      std::vector<double> best(methods_.size(), 0.0);
      const uint64_t began = now_ns();
      for (int pass = 0; pass < 5 && (pass < 2 || now_ns() - began < 2000000000ULL); ++pass) {
        for (size_t k = 0; k < methods_.size(); ++k) {
          const uint64_t start = now_ns();
          call_program(*methods_[k]->method, methods_[k]->static_in, model_->outputs);
          const double ms = static_cast<double>(now_ns() - start) / 1e6;
          best[k] = pass == 0 ? ms : std::min(best[k], ms);
        }
      }
      for (size_t k = 0; k < methods_.size(); ++k) methods_[k]->ms = std::round(best[k] * 1e4) / 1e4;
      return memory;
    }
#ifdef TRITONKIT_CUDA
    c10::cuda::CUDAGuard device_guard(device_);
    stream_ = std::make_unique<c10::cuda::CUDAStream>(c10::cuda::getStreamFromPool(false, device_.index()));
    c10::cuda::CUDAStreamGuard stream_guard(*stream_);
    c10::InferenceMode mode;
    size_t free_before = 0, free_after = 0, total = 0;
    cudaMemGetInfo(&free_before, &total);
    const auto pool = at::cuda::graph_pool_handle();  // one pool: the graphs replay one at a time
    size_t graphs = 0;
    for (auto& m : methods_) {
      // as the fixed-shape path: lazy initialisations outside the capture (three runs with the optimiser)
      for (int run = 0; run < (torch::jit::getGraphExecutorOptimize() ? 3 : 1); ++run) {
        check_outputs(*m, call_program(*m->method, m->static_in, model_->outputs));
      }
      stream_->synchronize();
      if (model_->cuda_graphs) {
        m->graph = std::make_unique<at::cuda::CUDAGraph>();
        m->graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
        m->static_out = call_program(*m->method, m->static_in, model_->outputs);
        m->graph->capture_end();
        ++graphs;
      }
    }
    stream_->synchronize();
    cudaMemGetInfo(&free_after, &total);
    if (graphs > 0) {
      const double mib = free_before > free_after ? static_cast<double>(free_before - free_after) / (1 << 20) : 0.0;
      char text[160];
      std::snprintf(text, sizeof(text), "; %zu CUDA graphs, %.0f MiB of device memory taken by their warm-up and capture", graphs, mib);
      memory = text;
    }
    cudaEvent_t start = nullptr, end = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess) {
      throw std::runtime_error("creating a CUDA event failed");
    }
    for (auto& m : methods_) {  // three runs' mean, as BucketedPath times each replay
      cudaEventRecord(start, stream_->stream());
      for (int run = 0; run < 3; ++run) launch(*m);
      cudaEventRecord(end, stream_->stream());
      cudaEventSynchronize(end);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, end);
      m->ms = std::round(static_cast<double>(ms) / 3 * 1e4) / 1e4;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(end);
#endif
    return memory;
  }

  // Checks one request's inputs (``taken``: rows of the execute's requests before it) and reads its
  // lengths and edges into ``m``; its error response otherwise.
  TRITONSERVER_Error* read(TRITONBACKEND_Request* request, int64_t taken, Member* m) {
    for (const Tensor& spec : model_->inputs) {
      RequestInput in;
      if (auto* err = read_input(request, spec, &in)) return err;
      TRITONBACKEND_Input* input = in.input;
      const int64_t* shape = in.shape;
      const uint32_t dims = in.dims, buffers = in.buffers;
      const uint64_t bytes = in.bytes;
      if (m->rows < 0) m->rows = shape[0];
      if (shape[0] != m->rows) return error(TRITONSERVER_ERROR_INVALID_ARG, "inputs disagree on the batch size");
      if (taken + m->rows > model_->max_batch_size) {
        return error(TRITONSERVER_ERROR_INVALID_ARG, "the batch exceeds max_batch_size " + std::to_string(model_->max_batch_size));
      }
      uint64_t need = spec.dtype.bytes;
      for (uint32_t d = 0; d < dims; ++d) need *= static_cast<uint64_t>(shape[d]);
      if (bytes != need) {
        return error(TRITONSERVER_ERROR_INVALID_ARG, "input `" + spec.name + "` holds " + std::to_string(bytes) +
                                                         " bytes; its shape needs " + std::to_string(need));
      }
      m->inputs.push_back(input);
      m->shapes.emplace_back(shape, shape + dims);
      m->sizes.emplace_back(bytes, buffers);
    }
    const std::string refused = request_lengths(
        shapes_,
        [&](const std::string& name) -> std::pair<const int64_t*, size_t> {
          for (size_t i = 0; i < model_->inputs.size(); ++i) {
            if (model_->inputs[i].name == name) return {m->shapes[i].data(), m->shapes[i].size()};
          }
          return {nullptr, 0};
        },
        &m->lengths);
    if (!refused.empty()) return error(TRITONSERVER_ERROR_INVALID_ARG, refused);
    m->edges = edges_for(shapes_, m->lengths);
    return nullptr;
  }


  // One group: its rows staged at ``edges`` (pad values where a request is shorter), run in chunks,
  // each member's outputs cut back to its lengths into ``batch``.
  void run_group(const Edges& edges, const std::vector<size_t>& positions, const std::vector<Member>& members,
                 Batch& batch) {
    int64_t rows = 0;
    for (size_t p : positions) rows += members[p].rows;
    const auto host = at::TensorOptions().device(c10::kCPU).pinned_memory(on_gpu_);
    std::vector<at::Tensor> staged, out;
    for (size_t i = 0; i < model_->inputs.size(); ++i) {
      const Tensor& spec = model_->inputs[i];
      const std::vector<int64_t> shape = with_rows(rows, padded(spec, shapes_.input(spec.name), edges));
      at::Tensor buffer = at::empty(shape, host.dtype(spec.dtype.torch));
      bool partial = false;
      for (size_t p : positions) partial |= !std::equal(shape.begin() + 1, shape.end(), members[p].shapes[i].begin() + 1);
      if (partial) buffer.fill_(shapes_.pad_value(spec.name));
      int64_t offset = 0;
      for (size_t p : positions) {
        const Member& m = members[p];
        stage_input(buffer.narrow(0, offset, m.rows), m.inputs[i], m.shapes[i], spec, m.sizes[i].first, m.sizes[i].second);
        offset += m.rows;
      }
      staged.push_back(buffer);
    }
    for (const Tensor& spec : model_->outputs) {
      out.push_back(at::empty(with_rows(rows, padded(spec, shapes_.output(spec.name), edges)), host.dtype(spec.dtype.torch)));
    }
    int64_t start = 0;
    for (const auto& [piece, bucket] : chunks(rows)) {
      Method& m = *methods_[index_.at({bucket, edges})];
      for (size_t i = 0; i < staged.size(); ++i) {
        m.static_in[i].narrow(0, 0, piece).copy_(staged[i].narrow(0, start, piece), /*non_blocking=*/on_gpu_);
      }
      const std::vector<at::Tensor> outs = launch(m);
      for (size_t o = 0; o < outs.size(); ++o) {
        out[o].narrow(0, start, piece).copy_(outs[o].narrow(0, 0, piece), /*non_blocking=*/on_gpu_);
      }
      start += piece;
    }
    int64_t offset = 0;
    for (size_t p : positions) {
      const Member& m = members[p];
      std::vector<at::Tensor> answer;
      for (size_t o = 0; o < out.size(); ++o) {
        at::Tensor view = out[o].narrow(0, offset, m.rows);
        const ShapeBuckets::Carried* cut = shapes_.output(model_->outputs[o].name);
        for (size_t a = 0; cut != nullptr && a < cut->axes.size(); ++a) {
          view = view.narrow(cut->axes[a].first, 0, m.lengths[cut->axes[a].second]);
        }
        answer.push_back(view);
      }
      batch.outs[m.request] = std::move(answer);
      offset += m.rows;
    }
    batch.total += rows;
  }

  // The members at ``positions`` fail with ``why`` (their outputs dropped, their rows uncounted).
  void fail(Batch& batch, const std::vector<Member>& members, const std::vector<size_t>& positions, const std::string& why) {
    for (size_t p : positions) {
      const size_t r = members[p].request;
      if (batch.failures[r] != nullptr) continue;
      if (!batch.outs[r].empty()) batch.total -= members[p].rows;
      batch.outs[r].clear();
      batch.failures[r] = error(TRITONSERVER_ERROR_INTERNAL, "tritonkit_torch: " + why);
    }
  }

  void drain() noexcept {
#ifdef TRITONKIT_CUDA
    if (on_gpu_ && stream_) cudaStreamSynchronize(stream_->stream());
#endif
  }

  // The verbose line of one execute: each request's (rows, edges), then each group's edges and members.
  std::string describe(const std::vector<std::pair<int64_t, Edges>>& keyed, const Groups& groups) const {
    std::string text = "tritonkit_torch: " + model_->name + " execute: requests";
    for (const auto& [rows, edges] : keyed) text += " " + std::to_string(rows) + "x" + shape_text(edges.data(), edges.size());
    text += "; groups";
    for (const auto& [edges, positions] : groups) {
      text += " " + shape_text(edges.data(), edges.size()) + ":";
      for (size_t k = 0; k < positions.size(); ++k) text += (k ? "," : "") + std::to_string(positions[k]);
    }
    return text;
  }

  // One response per request of ``batch`` (its outputs or its failure), its statistics, its release.
  void answer(Batch& batch) {
    c10::InferenceMode mode;
#ifdef TRITONKIT_CUDA
    if (!done_.empty() && batch.total > 0) {
      const cudaError_t status = cudaEventSynchronize(done_[batch.slot]);
      if (status != cudaSuccess) {
        drain();
        for (size_t r = 0; r < batch.requests.size(); ++r) {
          if (batch.failures[r] == nullptr) {
            batch.failures[r] = error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: the batch's GPU work failed: ") + cudaGetErrorString(status));
          }
        }
      }
      batch.compute_end = now_ns();  // pipelined: the compute ends when the GPU's work does
    }
#endif
    for (size_t r = 0; r < batch.requests.size(); ++r) {
      TRITONBACKEND_Response* response = nullptr;
      TRITONSERVER_Error* failure = batch.failures[r];
      if (TRITONBACKEND_ResponseNew(&response, batch.requests[r]) == nullptr) {
        for (size_t o = 0; failure == nullptr && o < batch.outs[r].size(); ++o) failure = write_output(response, model_->outputs[o], batch.outs[r][o]);
        TRITONBACKEND_ResponseSend(response, kResponseCompleteFinal, failure);
      }
      TRITONBACKEND_ModelInstanceReportStatistics(triton_, batch.requests[r], failure == nullptr, batch.exec_start,
                                                  batch.compute_start, batch.compute_end, now_ns());
      if (failure != nullptr) TRITONSERVER_ErrorDelete(failure);
      TRITONBACKEND_RequestRelease(batch.requests[r], kRequestReleaseAll);
    }
    batch.outs.clear();
    if (batch.total > 0) {
      TRITONBACKEND_ModelInstanceReportBatchStatistics(triton_, static_cast<uint64_t>(batch.total), batch.exec_start,
                                                       batch.compute_start, batch.compute_end, now_ns());
    }
  }


  ModelState* model_;
  const ShapeBuckets& shapes_;
  TRITONBACKEND_ModelInstance* triton_;
  torch::jit::Module* module_;
  c10::Device device_;
  bool on_gpu_;
  std::vector<int64_t> sizes_;  // the batch buckets
  std::vector<std::unique_ptr<Method>> methods_;
  std::map<std::pair<int64_t, Edges>, size_t> index_;  // (batch bucket, edges) -> methods_
#ifdef TRITONKIT_CUDA
  std::unique_ptr<c10::cuda::CUDAStream> stream_;
  std::vector<cudaEvent_t> done_;  // per slot, with the answer thread on a GPU
#endif
  std::unique_ptr<Outbox<Batch>> outbox_;  // last: stopped (its batches answered) before the rest goes
};

}  // namespace
}  // namespace tk
