// What the kernel offers the launcher, found by calling each interface once
// (not by reading version numbers). Cached for the life of the process; the
// full probe (probe.h) refines the same cache with real sandboxes.
#pragma once

namespace cubicle::runtime {

struct HostFeatures {
  bool clone3 = false;         // clone3(2), Linux 5.3
  bool new_mount_api = false;  // open_tree/move_mount/mount_setattr, Linux 5.12
  bool openat2 = false;        // openat2 with RESOLVE_BENEATH, Linux 5.6
  bool fresh_procfs = true;    // cleared once a sandbox had to fall back
};

HostFeatures Features();

// Records that a sandbox could not mount a new procfs, so `cubicle probe`
// and later launches report the degradation.
void NoteProcfsFallback();

}  // namespace cubicle::runtime
