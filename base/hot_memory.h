// Memory the daemon's request-serving threads write on every request
// (their stacks, their malloc arenas), unshared from forks ahead of time.
//
// Every zygote is a fork of the daemon, and a fork makes each page the
// two processes share copy-on-write: the next request's writes to that
// memory then fault, each fault a page copy (~2 us here; ~14 per request
// before this, on the request path). UnshareHotMemory(), called right
// after a fork and off the request path, takes those copies ahead: it
// write-faults (MADV_POPULATE_WRITE, which leaves the contents as they
// are) the resident pages of every registered range. The fork's child
// keeps the old pages, which it would have shared otherwise; the cost is
// the copies (the stdio readers' stacks and arenas: a few hundred KiB at
// most per fork; an idle zygote's PSS did not move measurably).
#pragma once

namespace cubicle {

// Registers the calling thread's stack until the thread ends. Idempotent.
void RegisterHotStack();

// Registers the malloc arena the calling thread allocates from, when it
// is one of glibc's per-thread arenas (the mapping that holds a block it
// allocates now, as /proc/self/maps has it then; the main heap, which
// every thread shares, is left out). A request's own allocations and
// frees write there too. Idempotent; until the thread ends.
void RegisterHotHeap();

// Unshares the resident pages of every registered stack and heap.
// Safe while those threads run: a page is replaced under its table lock,
// as by their own write fault. Without MADV_POPULATE_WRITE (Linux < 5.14)
// it does nothing.
void UnshareHotMemory();

// The registered ranges' count (for tests).
int HotMemoryCount();

}  // namespace cubicle
