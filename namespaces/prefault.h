// Page-table prefaulting for a pool's sandboxes (DESIGN §5).
//
// A sandbox's processes are forks: init of the launcher, the payload of
// init. fork copies no page-table entries for file-backed text, and shares
// every written page copy-on-write, so the first time a forked process
// runs a function, or writes a page its parent also has, it takes a page
// fault. On a virtual machine with shadow page tables one fault costs tens
// of microseconds — more than a syscall-heavy step of the hand-off itself.
// A pool's zygote has time before its request: it maps what the hand-off
// will touch while it waits, in one madvise per range instead of one fault
// per page.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cubicle::namespaces {

struct MemoryRange {
  uintptr_t start = 0;
  size_t length = 0;
};

// Launcher side (before clone: it takes the dynamic loader's lock): the
// executable segments of every object loaded in this process. A forked
// child has them at the same addresses.
std::vector<MemoryRange> ExecutableSegments();

// Child side, allocation-free. Maps each range's pages into this process's
// page tables without faulting (MADV_POPULATE_READ, Linux 5.14); on an
// older kernel, or a range that is gone, it does nothing: this is only an
// optimisation.
void PrefaultText(const MemoryRange* ranges, size_t count);

// Child side: writes a byte to each page of [start, start + length), so
// that the pages are this process's own before the hand-off writes them.
void PrefaultWritable(void* start, size_t length);

// Child side: the same for the `bytes` of stack below the caller's frame.
void PrefaultStack(size_t bytes);

}  // namespace cubicle::namespaces
