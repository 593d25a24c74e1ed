// A request's input into its padded staging rows and a tensor into a response's output, for tritonkit_torch's
// shape-bucketed execute (bucketed.h), whose requests and answers have shapes of their own: memcpy where the
// layout allows (the same shape, or only axis 1 longer or cut: a text model's sequence), else through torch
// (an input viewed in its one host buffer or its buffers gathered, from GPU memory too; any strided view).
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef TRITONKIT_CUDA
#include <cuda_runtime_api.h>
#endif

#include "model_state.h"
#include "program.h"
#include "triton_api.h"

namespace tk {
namespace {

// Throws ``err``'s message (and deletes it); nothing for nullptr.
void check(TRITONSERVER_Error* err) {
  if (err == nullptr) return;
  const std::string message = TRITONSERVER_ErrorMessage(err);
  TRITONSERVER_ErrorDelete(err);
  throw std::runtime_error(message);
}

// ``input`` (of ``shape``, ``bytes`` in ``buffers`` buffers, the config's ``spec``) as a host tensor: a
// view of its one host buffer, valid while the request is, else a tensor its buffers are gathered into.
at::Tensor input_tensor(TRITONBACKEND_Input* input, const std::vector<int64_t>& shape, const Tensor& spec,
                        uint64_t bytes, uint32_t buffers) {
  const auto opts = at::TensorOptions().dtype(spec.dtype.torch);
  const void* src = nullptr;
  uint64_t size = 0;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
  int64_t type_id = 0;
  if (buffers == 1) {
    check(TRITONBACKEND_InputBuffer(input, 0, &src, &size, &type, &type_id));
    if (type != TRITONSERVER_MEMORY_GPU && size == bytes) return at::from_blob(const_cast<void*>(src), shape, opts);
  }
  at::Tensor whole = at::empty(shape, opts);
  char* dst = static_cast<char*>(whole.data_ptr());
  uint64_t copied = 0;
  for (uint32_t k = 0; k < buffers; ++k) {
    check(TRITONBACKEND_InputBuffer(input, k, &src, &size, &type, &type_id));
    if (copied + size > bytes) throw std::runtime_error("input buffers exceed the input's size");
    if (type == TRITONSERVER_MEMORY_GPU) {
#ifdef TRITONKIT_CUDA
      if (cudaMemcpy(dst + copied, src, size, cudaMemcpyDefault) != cudaSuccess) {
        throw std::runtime_error("copying input `" + spec.name + "` from GPU memory failed");
      }
#else
      throw std::runtime_error("input in GPU memory; this build has no CUDA");
#endif
    } else {
      std::memcpy(dst + copied, src, size);
    }
    copied += size;
  }
  if (copied != bytes) throw std::runtime_error("input `" + spec.name + "`'s buffers hold fewer bytes than its shape");
  return whole;
}

// Whether ``t``'s axes past the first are laid out contiguously (each row one block of memory).
bool rows_contiguous(const at::Tensor& t) {
  int64_t step = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != step) return false;
    step *= t.size(d);
  }
  return true;
}

// Request input ``input`` (of ``shape``) into ``dst``, the staging rows it fills (contiguous, its axes at
// least as long): one memcpy for the same shape, one per row where only axis 1 is longer (a text model's
// [rows, length]); otherwise, or with its bytes in several buffers or GPU memory, through torch.
void stage_input(at::Tensor dst, TRITONBACKEND_Input* input, const std::vector<int64_t>& shape, const Tensor& spec,
                 uint64_t bytes, uint32_t buffers) {
  bool rowwise = buffers == 1 && shape.size() >= 2 && dst.is_contiguous() && bytes > 0;
  for (size_t d = 2; rowwise && d < shape.size(); ++d) rowwise = shape[d] == dst.size(static_cast<int64_t>(d));
  if (rowwise) {
    const void* src = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
    int64_t type_id = 0;
    check(TRITONBACKEND_InputBuffer(input, 0, &src, &size, &type, &type_id));
    if (type != TRITONSERVER_MEMORY_GPU && size == bytes) {
      char* to = static_cast<char*>(dst.data_ptr());
      if (shape[1] == dst.size(1)) {
        std::memcpy(to, src, bytes);
        return;
      }
      const uint64_t row = bytes / static_cast<uint64_t>(shape[0]), stride = dst.stride(0) * spec.dtype.bytes;
      for (int64_t r = 0; r < shape[0]; ++r) std::memcpy(to + r * stride, static_cast<const char*>(src) + r * row, row);
      return;
    }
  }
  for (size_t d = 1; d < shape.size(); ++d) {
    if (shape[d] != dst.size(static_cast<int64_t>(d))) dst = dst.narrow(static_cast<int64_t>(d), 0, shape[d]);
  }
  dst.copy_(input_tensor(input, shape, spec, bytes, buffers));
}

// Output ``spec`` of ``response``: ``view``'s shape and values.
TRITONSERVER_Error* write_output(TRITONBACKEND_Response* response, const Tensor& spec, const at::Tensor& view) {
  const std::vector<int64_t> shape = view.sizes().vec();
  TRITONBACKEND_Output* output = nullptr;
  if (auto* err = TRITONBACKEND_ResponseOutput(response, &output, spec.name.c_str(), spec.dtype.triton, shape.data(),
                                               static_cast<uint32_t>(shape.size()))) {
    return err;
  }
  const uint64_t bytes = static_cast<uint64_t>(view.numel()) * spec.dtype.bytes;
  void* buffer = nullptr;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
  int64_t type_id = 0;
  if (auto* err = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &type, &type_id)) return err;
  if (bytes == 0) return nullptr;
  try {
    if (type == TRITONSERVER_MEMORY_GPU) {
#ifdef TRITONKIT_CUDA
      const at::Tensor whole = view.contiguous();
      if (cudaMemcpy(buffer, whole.data_ptr(), bytes, cudaMemcpyDefault) != cudaSuccess) {
        return error(TRITONSERVER_ERROR_INTERNAL, "copying output `" + spec.name + "` to GPU memory failed");
      }
#else
      return error(TRITONSERVER_ERROR_UNSUPPORTED, "output buffer in GPU memory; this build has no CUDA");
#endif
    } else {
      if (view.is_contiguous()) {
        std::memcpy(buffer, view.data_ptr(), bytes);
      } else if (view.dim() >= 2 && rows_contiguous(view)) {  // cut back on axis 1: one memcpy per row
        const uint64_t row = bytes / static_cast<uint64_t>(view.size(0)), stride = view.stride(0) * spec.dtype.bytes;
        const char* from = static_cast<const char*>(view.data_ptr());
        for (int64_t r = 0; r < view.size(0); ++r) std::memcpy(static_cast<char*>(buffer) + r * row, from + r * stride, row);
      } else {
        at::from_blob(buffer, shape, at::TensorOptions().dtype(spec.dtype.torch)).copy_(view);
      }
    }
  } catch (const std::exception& e) {
    return error(TRITONSERVER_ERROR_INTERNAL, std::string("tritonkit_torch: ") + first_line(e.what()));
  }
  return nullptr;
}

}  // namespace
}  // namespace tk
