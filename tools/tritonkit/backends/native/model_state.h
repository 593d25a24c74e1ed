// The model's config as tritonkit_torch reads it (Triton hands it over as JSON): the tensors with
// their data types and fixed dims, max_batch_size, the batch buckets and the backend's parameters.
#pragma once

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mini_json.h"
#include "triton_api.h"

namespace tk {

TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& message);

namespace {

struct DType {
  TRITONSERVER_DataType triton;
  at::ScalarType torch;
  size_t bytes;
};

bool dtype_of(const std::string& name, DType* out) {
  static const std::vector<std::pair<std::string, DType>> table = {
      {"TYPE_BOOL", {TRITONSERVER_TYPE_BOOL, at::kBool, 1}},
      {"TYPE_UINT8", {TRITONSERVER_TYPE_UINT8, at::kByte, 1}},
      {"TYPE_INT8", {TRITONSERVER_TYPE_INT8, at::kChar, 1}},
      {"TYPE_INT16", {TRITONSERVER_TYPE_INT16, at::kShort, 2}},
      {"TYPE_INT32", {TRITONSERVER_TYPE_INT32, at::kInt, 4}},
      {"TYPE_INT64", {TRITONSERVER_TYPE_INT64, at::kLong, 8}},
      {"TYPE_FP16", {TRITONSERVER_TYPE_FP16, at::kHalf, 2}},
      {"TYPE_BF16", {TRITONSERVER_TYPE_BF16, at::kBFloat16, 2}},
      {"TYPE_FP32", {TRITONSERVER_TYPE_FP32, at::kFloat, 4}},
      {"TYPE_FP64", {TRITONSERVER_TYPE_FP64, at::kDouble, 8}},
  };
  for (const auto& entry : table) {
    if (entry.first == name) {
      *out = entry.second;
      return true;
    }
  }
  return false;
}

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> dims;  // without the batch axis
  size_t row_bytes = 0;
};

struct ModelState {
  std::string name;
  std::string version_dir;
  int64_t max_batch_size = 0;
  std::vector<Tensor> inputs, outputs;
  std::vector<int64_t> buckets;
  bool cuda_graphs = true;
  int64_t copy_threads = 1;               // threads a batch's input copy may use (copy_in.h)
  int64_t copy_split_bytes = 1 << 20;     // a batch carrying fewer bytes is copied on one thread
  bool answer_thread = false;             // answers written on a thread of their own (answers.h)
  bool jit_optimize = false;              // on a GPU: TorchScript's optimised (fused) plan is what graphs capture
};

std::string parameter(const Json& config, const std::string& key) {
  return config["parameters"][key]["string_value"].text;
}

std::vector<int64_t> parse_buckets(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (part.find_first_not_of(" ") == std::string::npos) continue;
    out.push_back(std::stoll(part));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TRITONSERVER_Error* read_tensors(const Json& list, std::vector<Tensor>* out, const char* role) {
  for (const Json& item : list.items) {
    Tensor t;
    t.name = item["name"].text;
    if (!dtype_of(item["data_type"].text, &t.dtype)) {
      return error(TRITONSERVER_ERROR_INVALID_ARG, std::string(role) + " `" + t.name + "`: data type " +
                                                      item["data_type"].text + " is not served by tritonkit_torch");
    }
    size_t count = 1;
    for (const Json& d : item["dims"].items) {
      int64_t dim = d.as_int(-1);
      if (dim < 0) {
        return error(TRITONSERVER_ERROR_INVALID_ARG,
                     std::string(role) + " `" + t.name + "` has a variable dim; tritonkit_torch needs fixed dims");
      }
      t.dims.push_back(dim);
      count *= static_cast<size_t>(dim);
    }
    t.row_bytes = count * t.dtype.bytes;
    out->push_back(t);
  }
  return nullptr;
}

TRITONSERVER_Error* load_model_state(TRITONBACKEND_Model* model, ModelState* state) {
  const char* name = nullptr;
  TRITONBACKEND_ModelName(model, &name);
  state->name = name ? name : "model";
  TRITONBACKEND_ArtifactType type;
  const char* location = nullptr;
  uint64_t version = 0;
  if (auto* err = TRITONBACKEND_ModelRepository(model, &type, &location)) return err;
  if (auto* err = TRITONBACKEND_ModelVersion(model, &version)) return err;
  state->version_dir = std::string(location) + "/" + std::to_string(version);

  TRITONSERVER_Message* message = nullptr;
  if (auto* err = TRITONBACKEND_ModelConfig(model, 1, &message)) return err;
  const char* base = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
  std::string text = err == nullptr ? std::string(base, size) : std::string();
  TRITONSERVER_MessageDelete(message);
  if (err != nullptr) return err;
  Json config;
  try {
    config = JsonReader(text).parse();
  } catch (const std::exception& e) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, e.what());
  }
  state->max_batch_size = config["max_batch_size"].as_int(0);
  if (state->max_batch_size <= 0) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "tritonkit_torch needs max_batch_size > 0; got " +
                                                     std::to_string(state->max_batch_size));
  }
  if (auto* e = read_tensors(config["input"], &state->inputs, "input")) return e;
  if (auto* e = read_tensors(config["output"], &state->outputs, "output")) return e;
  state->cuda_graphs = parameter(config, "cuda_graphs") != "false";
  for (auto [key, field] : {std::pair<const char*, bool*>{"answer_thread", &state->answer_thread},
                            std::pair<const char*, bool*>{"jit_optimize", &state->jit_optimize}}) {
    const std::string text = parameter(config, key);  // absent: false
    if (!text.empty() && text != "true" && text != "false") {
      return error(TRITONSERVER_ERROR_INVALID_ARG,
                   std::string("parameter `") + key + "` must be true or false; got `" + text + "`");
    }
    *field = text == "true";
  }
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"copy_threads", &state->copy_threads},
                            std::pair<const char*, int64_t*>{"copy_split_bytes", &state->copy_split_bytes}}) {
    const std::string text = parameter(config, key);
    if (text.empty()) continue;
    size_t used = 0;
    try {
      *field = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || *field < 1) {
      return error(TRITONSERVER_ERROR_INVALID_ARG,
                   std::string("parameter `") + key + "` must be a positive integer; got `" + text + "`");
    }
  }
  try {
    state->buckets = parse_buckets(parameter(config, "batch_buckets"));
  } catch (const std::exception&) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "parameter `batch_buckets` must be comma-separated integers; got `" +
                                                     parameter(config, "batch_buckets") + "`");
  }
  return nullptr;
}

}  // namespace
}  // namespace tk
