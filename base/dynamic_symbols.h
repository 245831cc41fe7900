// Functions of a library loaded at run time (dlopen) rather than linked:
// libcrypto and libsystemd, which only some starts of the binary need
// (sessions/digest.h, rpc/systemd.h).
#pragma once

#include <dlfcn.h>

namespace cubicle {

// `*out` = the function `name` of `lib` (a dlopen handle), or null.
template <typename F>
void ResolveSymbol(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(::dlsym(lib, name));
}

}  // namespace cubicle
