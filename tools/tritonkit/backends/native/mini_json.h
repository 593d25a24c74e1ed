// A small JSON reader for the model configuration Triton hands the native backend (its own
// serialisation: objects, arrays, strings, numbers, booleans, null). Read-only, no dependencies.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tk {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> members;
  std::vector<std::string> keys;  // an object's keys in the order the text gives them

  const Json& operator[](const std::string& key) const {
    static const Json missing;
    auto found = members.find(key);
    return found == members.end() ? missing : found->second;
  }
  // Triton writes int64 fields (dims, max_batch_size) as numbers or as strings.
  int64_t as_int(int64_t fallback = 0) const {
    if (kind == Number) return static_cast<int64_t>(number);
    if (kind == String && !text.empty()) return std::strtoll(text.c_str(), nullptr, 10);
    return fallback;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& src) : s_(src) {}
  Json parse() {
    Json value = read();
    skip();
    if (i_ != s_.size()) fail("trailing characters");
    return value;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("model config JSON: ") + what + " at offset " + std::to_string(i_));
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  char peek() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail("unexpected character");
    ++i_;
  }
  std::string read_string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        char e = s_[i_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': out += '?'; i_ += 4; break;  // names and values here are ASCII
          default: out += e;
        }
      } else {
        out += c;
      }
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Json read() {
    Json v;
    char c = peek();
    if (c == '{') {
      v.kind = Json::Object;
      ++i_;
      if (peek() == '}') { ++i_; return v; }
      while (true) {
        std::string key = read_string();
        expect(':');
        if (v.members.count(key) == 0) v.keys.push_back(key);
        v.members[key] = read();
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++i_;
      if (peek() == ']') { ++i_; return v; }
      while (true) {
        v.items.push_back(read());
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.text = read_string();
      return v;
    }
    if (s_.compare(i_, 4, "true") == 0) { v.kind = Json::Bool; v.boolean = true; i_ += 4; return v; }
    if (s_.compare(i_, 5, "false") == 0) { v.kind = Json::Bool; i_ += 5; return v; }
    if (s_.compare(i_, 4, "null") == 0) { i_ += 4; return v; }
    size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' || s_[i_] == '+' ||
                              s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      ++i_;
    if (start == i_) fail("unexpected character");
    v.kind = Json::Number;
    v.number = std::strtod(s_.substr(start, i_ - start).c_str(), nullptr);
    return v;
  }
};

}  // namespace tk
