// Stacks of the daemon's threads that serve requests, unshared from forks
// ahead of time.
//
// Every zygote is a fork of the daemon, and a fork makes each page the
// two processes share copy-on-write: the next request's writes to its
// thread's stack then fault, each fault a page copy (~2 us here, eight or
// so per request, on the request path). UnshareHotStacks(), called right
// after a fork and off the request path, takes those copies ahead: it
// write-faults (MADV_POPULATE_WRITE, which leaves the contents as they
// are) the resident pages of every registered stack. The fork's child
// keeps the old pages; it never touched these stacks, so the cost is their
// copy, a few tens of KiB per fork.
#pragma once

namespace cubicle {

// Registers the calling thread's stack until the thread ends. Idempotent.
void RegisterHotStack();

// Unshares the resident pages of every registered stack (see above).
// Safe while those threads run: a page is replaced under its table lock,
// as by their own write fault. Without MADV_POPULATE_WRITE (Linux < 5.14)
// it does nothing.
void UnshareHotStacks();

// The registered stacks' count (for tests).
int HotStackCount();

}  // namespace cubicle
