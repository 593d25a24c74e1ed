// A batch's input copy: every request's input bytes into the instance's staging buffers, split over
// several threads when the config asks (``copy_threads``) and the batch is large. One thread copies a
// batch of 28 ResNet-50 images (FP32 [3, 224, 224], 17 MB) in 3.4-5.7 ms on an H100 host under load;
// four did not serve more there (same call: 7,649 against 7,710 requests/s at c256, 6,893 against
// 6,971 at c512: the host's memory, shared with the clients and the gRPC front end, is the limit), so
// one thread is the default.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

namespace tk {

// One request buffer's bytes and where in the staging buffer they go.
struct CopyJob {
  char* dst;
  const char* src;
  uint64_t bytes;
};

// Copies bytes [begin, end) of the jobs laid end to end.
inline void copy_range(const std::vector<CopyJob>& jobs, uint64_t begin, uint64_t end) {
  uint64_t at = 0;
  for (const CopyJob& job : jobs) {
    if (at >= end) break;
    const uint64_t lo = std::max(begin, at);
    const uint64_t hi = std::min(end, at + job.bytes);
    if (lo < hi) std::memcpy(job.dst + (lo - at), job.src + (lo - at), hi - lo);
    at += job.bytes;
  }
}

// Copies every job: on the calling thread alone below ``split_bytes`` in all, otherwise in equal
// shares, one per started ``split_bytes``, over at most ``threads`` threads (the caller's among them;
// a thread that cannot start leaves its share to the caller). Returns the number of shares.
inline unsigned copy_all(const std::vector<CopyJob>& jobs, unsigned threads, uint64_t split_bytes) {
  uint64_t total = 0;
  for (const CopyJob& job : jobs) total += job.bytes;
  const uint64_t wanted = split_bytes == 0 ? threads : total / split_bytes;
  const unsigned shares = static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, std::max(threads, 1u)));
  if (shares == 1) {
    copy_range(jobs, 0, total);
    return 1;
  }
  const uint64_t share = (total + shares - 1) / shares;
  std::vector<std::thread> helpers;
  std::vector<unsigned> left;  // shares no helper took
  helpers.reserve(shares - 1);
  for (unsigned s = 1; s < shares; ++s) {
    const uint64_t begin = std::min(total, s * share), end = std::min(total, (s + 1) * share);
    try {
      helpers.emplace_back(copy_range, std::cref(jobs), begin, end);
    } catch (const std::system_error&) {
      left.push_back(s);
    }
  }
  copy_range(jobs, 0, std::min(total, share));
  for (unsigned s : left) copy_range(jobs, std::min(total, s * share), std::min(total, (s + 1) * share));
  for (std::thread& helper : helpers) helper.join();
  return shares;
}

}  // namespace tk
