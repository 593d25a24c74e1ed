// What tritonkit_torch's two execute paths share (fixed shapes in tritonkit_torch.cc, shape buckets in
// bucketed.h): the clock, the first line of a failure's text, one request input read and checked, one call of a traced method (its outputs
// checked against the config's count and cast to its dtypes) and a line in the server's log.
#pragma once

#include <torch/script.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_state.h"
#include "triton_api.h"

namespace tk {
namespace {

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// One input of a request as Triton describes it.
struct RequestInput {
  TRITONBACKEND_Input* input = nullptr;
  const int64_t* shape = nullptr;
  uint32_t dims = 0, buffers = 0;
  uint64_t bytes = 0;
};

// ``spec``'s input of ``request`` read into ``out`` and checked: present, its dtype, its rank, every fixed
// dim (a -1 dim, a shape bucket's axis, takes any length) and at least one row; the one-line error otherwise.
TRITONSERVER_Error* read_input(TRITONBACKEND_Request* request, const Tensor& spec, RequestInput* out) {
  if (auto* err = TRITONBACKEND_RequestInput(request, spec.name.c_str(), &out->input)) {
    TRITONSERVER_ErrorDelete(err);
    return error(TRITONSERVER_ERROR_INVALID_ARG, "request lacks input `" + spec.name + "`");
  }
  TRITONSERVER_DataType dtype;
  if (auto* err = TRITONBACKEND_InputProperties(out->input, nullptr, &dtype, &out->shape, &out->dims, &out->bytes,
                                                &out->buffers)) {
    return err;
  }
  if (dtype != spec.dtype.triton) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "input `" + spec.name + "` has the wrong data type");
  }
  const int64_t* shape = out->shape;
  bool same = out->dims == spec.dims.size() + 1;
  for (size_t d = 0; same && d < spec.dims.size(); ++d) same = spec.dims[d] < 0 ? shape[d + 1] >= 0 : shape[d + 1] == spec.dims[d];
  if (!same || shape[0] < 1) return error(TRITONSERVER_ERROR_INVALID_ARG, "input `" + spec.name + "` has the wrong shape");
  return nullptr;
}

// ``method`` on ``in``: its outputs (a tuple, a list or one tensor) as the config's ``outputs`` dtypes.
std::vector<at::Tensor> call_program(torch::jit::Method& method, const std::vector<at::Tensor>& in,
                                     const std::vector<Tensor>& outputs) {
  std::vector<c10::IValue> args(in.begin(), in.end());
  c10::IValue result = method(args);
  std::vector<at::Tensor> outs;
  if (result.isTuple()) {
    for (const auto& item : result.toTupleRef().elements()) outs.push_back(item.toTensor());
  } else if (result.isTensorList()) {
    for (const auto& item : result.toTensorVector()) outs.push_back(item);
  } else {
    outs.push_back(result.toTensor());
  }
  if (outs.size() != outputs.size()) {
    throw std::runtime_error("program returned " + std::to_string(outs.size()) + " outputs; the config names " +
                             std::to_string(outputs.size()));
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    if (outs[o].scalar_type() != outputs[o].dtype.torch) outs[o] = outs[o].to(outputs[o].dtype.torch);
  }
  return outs;
}

// ``text`` in the server's log at ``level`` (verbose lines only where the server runs with --log-verbose).
void log_line(TRITONSERVER_LogLevel level, const std::string& text) {
  if (TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, "tritonkit_torch", 0, text.c_str())) {
    TRITONSERVER_ErrorDelete(err);
  }
}

}  // namespace
}  // namespace tk
