#include "namespaces/prefault.h"

#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace cubicle::namespaces {
namespace {

constexpr size_t kPage = 4096;

int AddExecutableSegments(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<MemoryRange>*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0 || ph.p_memsz == 0) continue;
    const uintptr_t begin = (info->dlpi_addr + ph.p_vaddr) & ~(kPage - 1);
    const uintptr_t end = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz + kPage - 1) & ~(kPage - 1);
    out->push_back({begin, end - begin});
  }
  return 0;
}

}  // namespace

std::vector<MemoryRange> ExecutableSegments() {
  std::vector<MemoryRange> out;
  ::dl_iterate_phdr(AddExecutableSegments, &out);
  return out;
}

void PrefaultText(const MemoryRange* ranges, size_t count) {
  const int saved = errno;
  // Errors are ignored: EINVAL on a kernel without MADV_POPULATE_READ (a
  // few wasted syscalls), or a mapping it cannot populate; either way the
  // pages fault in on use as they would have.
  for (size_t i = 0; i < count; ++i) {
    ::madvise(reinterpret_cast<void*>(ranges[i].start), ranges[i].length, MADV_POPULATE_READ);
  }
  errno = saved;
}

void PrefaultWritable(void* start, size_t length) {
  // An atomic or of 0 is one write access: one fault per page, not a read
  // fault and then a copy-on-write one, and the contents stay.
  auto* bytes = static_cast<char*>(start);
  for (size_t off = 0; off < length; off += kPage) __atomic_fetch_or(&bytes[off], 0, __ATOMIC_RELAXED);
  if (length > 0) __atomic_fetch_or(&bytes[length - 1], 0, __ATOMIC_RELAXED);
}

void PrefaultStack(size_t bytes) {
  // A frame of `bytes` whose pages are written top-down, as a stack grows;
  // alloca keeps it one frame, not an array the compiler may drop.
  auto* area = static_cast<volatile char*>(__builtin_alloca(bytes));
  for (size_t off = bytes; off >= kPage; off -= kPage) area[off - 1] = 0;
  area[0] = 0;
}

}  // namespace cubicle::namespaces
