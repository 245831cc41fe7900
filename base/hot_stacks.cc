#include "base/hot_stacks.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace cubicle {
namespace {

struct Range {
  uintptr_t begin;
  size_t size;
};

std::mutex& Mu() {
  static std::mutex* mu = new std::mutex;  // outlives every thread's exit
  return *mu;
}
std::vector<Range>& Ranges() {
  static std::vector<Range>* ranges = new std::vector<Range>;
  return *ranges;
}
std::atomic<bool> g_unsupported{false};

// A thread's registration, dropped at its exit.
struct Registration {
  Range range{0, 0};
  ~Registration() {
    if (range.size == 0) return;
    std::lock_guard<std::mutex> lock(Mu());
    auto& v = Ranges();
    v.erase(std::remove_if(v.begin(), v.end(), [&](const Range& r) { return r.begin == range.begin; }), v.end());
  }
};
thread_local Registration t_registration;

// The resident pages of [begin, begin + size), as runs, populated writable.
void Unshare(const Range& r, std::vector<unsigned char>& resident) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = r.size / page;
  resident.resize(pages);
  if (::mincore(reinterpret_cast<void*>(r.begin), pages * page, resident.data()) != 0) return;
  for (size_t i = 0; i < pages;) {
    if (!(resident[i] & 1)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < pages && (resident[j] & 1)) ++j;
    if (::madvise(reinterpret_cast<void*>(r.begin + i * page), (j - i) * page, MADV_POPULATE_WRITE) != 0 &&
        errno == EINVAL) {
      g_unsupported.store(true);
      return;
    }
    i = j;
  }
}

}  // namespace

void RegisterHotStack() {
  if (t_registration.range.size != 0) return;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* addr = nullptr;
  size_t size = 0;
  const bool ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
  pthread_attr_destroy(&attr);
  if (!ok || size == 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(addr) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + size) & ~(page - 1);
  if (end <= begin) return;
  t_registration.range = {begin, end - begin};
  std::lock_guard<std::mutex> lock(Mu());
  Ranges().push_back(t_registration.range);
}

void UnshareHotStacks() {
  if (g_unsupported.load(std::memory_order_relaxed)) return;
  std::vector<unsigned char> resident;
  std::lock_guard<std::mutex> lock(Mu());  // a registered thread cannot end meanwhile
  for (const Range& r : Ranges()) Unshare(r, resident);
}

int HotStackCount() {
  std::lock_guard<std::mutex> lock(Mu());
  return static_cast<int>(Ranges().size());
}

}  // namespace cubicle
