// Shape buckets as tritonkit_torch reads them: the config parameter ``shape_buckets`` (a JSON object
// described in tools/tritonkit/backends/runners/shape_buckets.py, which the python runners, the client
// and the build read), a request's length per axis, the edges it is padded to, and the grouping of one
// execute's requests. Each rule here is that module's, line for line, so the native and the python
// runners answer alike: the same one-line refusals (TooLongError's above the last edge), the same groups
// (``plan_groups``: a group padded up into a longer one while that lowers the total cost).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mini_json.h"

namespace tk {

using Edges = std::vector<int64_t>;  // one padded length per axis, in the parameter's axis order

struct ShapeBuckets {
  struct Axis {
    std::string name;
    Edges edges;  // ascending; the last is the longest length the model takes
  };
  // A tensor carrying axes: (its axis index, batch axis 0 counted; the position in ``axes``).
  struct Carried {
    std::string tensor;
    std::vector<std::pair<int64_t, size_t>> axes;
  };
  std::vector<Axis> axes;
  std::vector<Carried> inputs, outputs;  // in the parameter's order
  std::vector<std::pair<std::string, double>> pad;
  std::string pad_at = "server";

  static const Carried* find(const std::vector<Carried>& list, const std::string& name) {
    for (const Carried& c : list) {
      if (c.tensor == name) return &c;
    }
    return nullptr;
  }
  const Carried* input(const std::string& name) const { return find(inputs, name); }
  const Carried* output(const std::string& name) const { return find(outputs, name); }
  double pad_value(const std::string& name) const {
    for (const auto& entry : pad) {
      if (entry.first == name) return entry.second;
    }
    return 0.0;
  }
};

namespace buckets_detail {

inline bool whole(const Json& v) { return v.kind == Json::Number && v.number == std::floor(v.number); }

inline std::vector<ShapeBuckets::Carried> axis_map(const Json& value, const char* where,
                                                   const std::vector<ShapeBuckets::Axis>& axes) {
  const std::string at = std::string("`shape_buckets.") + where;
  if (value.kind != Json::Object) throw std::runtime_error(at + "` must map tensor names to {axis: name}");
  std::vector<ShapeBuckets::Carried> out;
  for (const std::string& tensor : value.keys) {
    const Json& mapping = value[tensor];
    if (mapping.kind != Json::Object) throw std::runtime_error(at + "." + tensor + "` must map axis indices to names");
    ShapeBuckets::Carried carried{tensor, {}};
    for (const std::string& index : mapping.keys) {
      int64_t position = -1;
      try {
        size_t used = 0;
        position = std::stoll(index, &used);
        if (used != index.size()) position = -1;
      } catch (const std::exception&) {
        position = -1;
      }
      if (position < 1) {
        throw std::runtime_error(at + "." + tensor + "` axis index must be an integer >= 1 (0 is the batch); got '" +
                                 index + "'");
      }
      const std::string& axis = mapping[index].text;
      size_t found = axes.size();
      for (size_t a = 0; a < axes.size(); ++a) {
        if (mapping[index].kind == Json::String && axes[a].name == axis) found = a;
      }
      if (found == axes.size()) throw std::runtime_error(at + "." + tensor + "` names axis '" + axis + "', not one of axes");
      carried.axes.emplace_back(position, found);
    }
    out.push_back(carried);
  }
  return out;
}

}  // namespace buckets_detail

// The parameter's buckets; a malformed value throws one line naming what was expected.
inline ShapeBuckets parse_shape_buckets(const std::string& text) {
  Json data;
  try {
    data = JsonReader(text).parse();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("parameter `shape_buckets` must be a JSON object (") + e.what() + ")");
  }
  if (data.kind != Json::Object) throw std::runtime_error("parameter `shape_buckets` must be a JSON object");
  ShapeBuckets out;
  const Json& axes = data["axes"];
  if (axes.kind != Json::Object || axes.keys.empty()) {
    throw std::runtime_error("`shape_buckets.axes` must map axis names to edge lists");
  }
  for (const std::string& name : axes.keys) {
    ShapeBuckets::Axis axis{name, {}};
    for (const Json& e : axes[name].items) {
      if (!buckets_detail::whole(e) || e.number < 1 || (!axis.edges.empty() && e.number <= axis.edges.back())) {
        axis.edges.clear();
        break;
      }
      axis.edges.push_back(static_cast<int64_t>(e.number));
    }
    if (axes[name].kind != Json::Array || axis.edges.empty()) {
      throw std::runtime_error("`shape_buckets.axes." + name + "` must be ascending distinct integers >= 1");
    }
    out.axes.push_back(axis);
  }
  out.inputs = buckets_detail::axis_map(data["inputs"], "inputs", out.axes);
  if (out.inputs.empty()) throw std::runtime_error("`shape_buckets.inputs` must name at least one input axis");
  const Json& outputs = data["outputs"];
  if (outputs.kind != Json::Null) out.outputs = buckets_detail::axis_map(outputs, "outputs", out.axes);
  const Json& pad = data["pad"];
  if (pad.kind != Json::Null && pad.kind != Json::Object) {
    throw std::runtime_error("`shape_buckets.pad` must map input names to numbers");
  }
  for (const std::string& name : pad.keys) {
    if (pad[name].kind != Json::Number) throw std::runtime_error("`shape_buckets.pad` must map input names to numbers");
    out.pad.emplace_back(name, pad[name].number);
  }
  const Json& pad_at = data["pad_at"];
  if (pad_at.kind != Json::Null) {
    if (pad_at.kind != Json::String || (pad_at.text != "server" && pad_at.text != "client")) {
      throw std::runtime_error("`shape_buckets.pad_at` must be server or client");
    }
    out.pad_at = pad_at.text;
  }
  return out;
}

inline std::string shape_text(const int64_t* shape, size_t dims) {
  std::string out = "[";
  for (size_t d = 0; d < dims; ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

// Each axis's length in one request (-1 where no input carries it) into ``lengths``; "" or the one line
// the request is refused with (shape_buckets.Buckets.lengths' messages, TooLongError's above the last
// edge). ``shape_of(name)``: the request's shape of input ``name`` (data, dims), data nullptr if absent.
inline std::string request_lengths(const ShapeBuckets& b,
                                   const std::function<std::pair<const int64_t*, size_t>(const std::string&)>& shape_of,
                                   std::vector<int64_t>* lengths) {
  lengths->assign(b.axes.size(), -1);
  std::vector<std::string> named(b.axes.size());
  std::vector<size_t> seen;  // axes in the order first met
  for (const ShapeBuckets::Carried& input : b.inputs) {
    const auto [shape, dims] = shape_of(input.tensor);
    if (shape == nullptr) continue;
    for (const auto& [index, axis] : input.axes) {
      const std::string& axis_name = b.axes[axis].name;
      if (index >= static_cast<int64_t>(dims)) {
        return "input `" + input.tensor + "` has shape " + shape_text(shape, dims) + "; expected an axis " +
               std::to_string(index) + " (" + axis_name + ")";
      }
      const int64_t length = shape[index];
      if ((*lengths)[axis] >= 0 && (*lengths)[axis] != length) {
        return "inputs `" + named[axis] + "` and `" + input.tensor + "` disagree on axis " + axis_name + ": " +
               std::to_string((*lengths)[axis]) + " and " + std::to_string(length);
      }
      if ((*lengths)[axis] < 0) seen.push_back(axis);
      (*lengths)[axis] = length;
      named[axis] = input.tensor;
    }
  }
  for (size_t axis : seen) {
    const int64_t length = (*lengths)[axis], longest = b.axes[axis].edges.back();
    if (length > longest) {
      return "input `" + named[axis] + "` is " + std::to_string(length) + " long on axis " + b.axes[axis].name +
             "; the model takes at most " + std::to_string(longest) + " (its last shape bucket)";
    }
    if (length < 1) {
      return "input `" + named[axis] + "` is " + std::to_string(length) + " long on axis " + b.axes[axis].name +
             "; expected at least 1";
    }
  }
  return "";
}

// The padded length per axis of a request of ``lengths`` (an axis no input carried keeps 0).
inline Edges edges_for(const ShapeBuckets& b, const std::vector<int64_t>& lengths) {
  Edges out;
  for (size_t a = 0; a < b.axes.size(); ++a) {
    int64_t edge = 0;
    if (lengths[a] >= 0) edge = *std::lower_bound(b.axes[a].edges.begin(), b.axes[a].edges.end(), lengths[a]);
    out.push_back(edge);
  }
  return out;
}

// A traced method's name: ``b<rows>`` without shape buckets, else ``b<rows>_s<edge>[x<edge>...]`` (the
// build's names, tritonkit.backends.native.method_name).
inline std::string method_name(int64_t rows, const Edges& edges) {
  std::string name = "b" + std::to_string(rows);
  for (size_t a = 0; a < edges.size(); ++a) name += (a ? "x" : "_s") + std::to_string(edges[a]);
  return name;
}

using Cost = std::function<double(int64_t, const Edges&)>;
using Groups = std::vector<std::pair<Edges, std::vector<size_t>>>;

// shape_buckets.plan_groups: ``members`` are (rows, padded edges) per request; returns (edges to pad to,
// member positions) per run, sorted by edges. Requests of equal edges run together; then, while it lowers
// the total cost, the pair (small, large) with every edge of small <= large's that saves the most merges.
inline Groups plan_groups(const std::vector<std::pair<int64_t, Edges>>& members, const Cost& cost) {
  Groups groups;  // in the order each edges first appears, as the Python dict's
  std::vector<int64_t> rows;
  for (size_t p = 0; p < members.size(); ++p) {
    size_t g = 0;
    while (g < groups.size() && groups[g].first != members[p].second) ++g;
    if (g == groups.size()) {
      groups.push_back({members[p].second, {}});
      rows.push_back(0);
    }
    groups[g].second.push_back(p);
    rows[g] += members[p].first;
  }
  bool merged = true;
  while (merged && groups.size() > 1) {
    merged = false;
    double best_saving = 0;
    size_t best_small = 0, best_large = 0;
    bool found = false;
    for (size_t s = 0; s < groups.size(); ++s) {
      for (size_t l = 0; l < groups.size(); ++l) {
        const Edges &small = groups[s].first, &large = groups[l].first;
        bool fits = s != l;
        for (size_t a = 0; fits && a < small.size(); ++a) fits = small[a] <= large[a];
        if (!fits) continue;
        const double saving = cost(rows[s], small) + cost(rows[l], large) - cost(rows[s] + rows[l], large);
        if (saving > 0 && (!found || saving > best_saving)) {
          found = true;
          best_saving = saving;
          best_small = s;
          best_large = l;
        }
      }
    }
    if (found) {
      auto& into = groups[best_large].second;
      into.insert(into.end(), groups[best_small].second.begin(), groups[best_small].second.end());
      rows[best_large] += rows[best_small];
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(best_small));
      rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(best_small));
      merged = true;
    }
  }
  for (auto& group : groups) std::sort(group.second.begin(), group.second.end());
  std::sort(groups.begin(), groups.end());
  return groups;
}

}  // namespace tk
