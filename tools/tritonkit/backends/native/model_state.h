// The model's config as tritonkit_torch reads it (Triton hands it over as JSON): the tensors with
// their data types and dims (fixed, or -1 on an axis the parameter ``shape_buckets`` names),
// max_batch_size, the batch buckets, the shape buckets and the backend's parameters.
#pragma once

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mini_json.h"
#include "shape_buckets.h"
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
  std::vector<int64_t> dims;  // without the batch axis; -1 on a shape bucket's axis
  size_t row_bytes = 0;       // a row's bytes (fixed dims only)
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
  std::shared_ptr<const ShapeBuckets> shapes;  // parameter ``shape_buckets`` (null: fixed shapes)
  int64_t graph_max_batch = 0;            // with shape buckets: the largest batch bucket (0: max_batch_size)
};

// The torch runner's rule (tritonkit.tune.space.buckets_of): ``listed`` sizes below ``top``, then ``top``;
// none listed: powers of two up to it. Each needs a method b<N> (b<N>_s<edges> with shape buckets).
std::vector<int64_t> batch_sizes(const std::vector<int64_t>& listed, int64_t top) {
  std::vector<int64_t> kept;
  if (listed.empty()) {
    for (int64_t b = 1; b < top; b *= 2) kept.push_back(b);
  } else {
    for (int64_t b : listed) {
      if (b >= 1 && b < top) kept.push_back(b);
    }
  }
  kept.push_back(top);
  return kept;
}

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

// ``variable``: -1 dims are kept (checked against the shape buckets by check_variable_dims).
TRITONSERVER_Error* read_tensors(const Json& list, std::vector<Tensor>* out, const char* role, bool variable) {
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
      if (dim < 0 && variable) {
        t.dims.push_back(-1);
        continue;
      }
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

// With shape buckets: every -1 dim is an axis the parameter names for that tensor, every tensor it names
// is the config's and has that axis, every axis is carried by an input (its length is read from one).
TRITONSERVER_Error* check_variable_dims(const ModelState& state) {
  const ShapeBuckets& b = *state.shapes;
  auto check = [&](const std::vector<Tensor>& tensors, const std::vector<ShapeBuckets::Carried>& named,
                   const char* role) -> std::string {
    for (const ShapeBuckets::Carried& c : named) {
      auto t = std::find_if(tensors.begin(), tensors.end(), [&](const Tensor& x) { return x.name == c.tensor; });
      if (t == tensors.end()) return "parameter `shape_buckets` names " + std::string(role) + " `" + c.tensor + "`, which the config lacks";
      for (const auto& axis : c.axes) {
        if (axis.first > static_cast<int64_t>(t->dims.size())) {
          return "parameter `shape_buckets` puts axis " + b.axes[axis.second].name + " at index " +
                 std::to_string(axis.first) + " of " + role + " `" + c.tensor + "`, which has " +
                 std::to_string(t->dims.size() + 1) + " axes";
        }
      }
    }
    for (const Tensor& t : tensors) {
      const ShapeBuckets::Carried* c = ShapeBuckets::find(named, t.name);
      for (size_t d = 0; d < t.dims.size(); ++d) {
        bool bucketed = false;
        for (size_t a = 0; c != nullptr && a < c->axes.size(); ++a) bucketed |= c->axes[a].first == static_cast<int64_t>(d + 1);
        if (t.dims[d] < 0 && !bucketed) {
          return std::string(role) + " `" + t.name + "` has a variable dim " + std::to_string(d + 1) +
                 " that parameter `shape_buckets` names no axis for; tritonkit_torch needs fixed dims elsewhere";
        }
      }
    }
    return "";
  };
  std::string problem = check(state.inputs, b.inputs, "input");
  if (problem.empty()) problem = check(state.outputs, b.outputs, "output");
  for (size_t a = 0; problem.empty() && a < b.axes.size(); ++a) {
    bool carried = false;
    for (const auto& c : b.inputs) {
      for (const auto& axis : c.axes) carried |= axis.second == a;
    }
    if (!carried) problem = "parameter `shape_buckets` axis " + b.axes[a].name + " is carried by no input";
  }
  return problem.empty() ? nullptr : error(TRITONSERVER_ERROR_INVALID_ARG, problem);
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
  const std::string shape_text = parameter(config, "shape_buckets");
  if (!shape_text.empty()) {
    try {
      state->shapes = std::make_shared<const ShapeBuckets>(parse_shape_buckets(shape_text));
    } catch (const std::exception& e) {
      return error(TRITONSERVER_ERROR_INVALID_ARG, e.what());
    }
  }
  const bool variable = state->shapes != nullptr;
  if (auto* e = read_tensors(config["input"], &state->inputs, "input", variable)) return e;
  if (auto* e = read_tensors(config["output"], &state->outputs, "output", variable)) return e;
  if (variable) {
    if (auto* e = check_variable_dims(*state)) return e;
  }
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
                            std::pair<const char*, int64_t*>{"copy_split_bytes", &state->copy_split_bytes},
                            std::pair<const char*, int64_t*>{"graph_max_batch", &state->graph_max_batch}}) {
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
