// Launcher errors in bubblewrap's words (what `cubicle bwrap` prints after
// "bwrap: "). The launcher's messages come from ErrnoStatus and the child's
// error record; these cases are the shapes each produces.
#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "base/status.h"
#include "cli/bwrap_args.h"
#include "cli/bwrap_command.h"

namespace cubicle::cli {
namespace {

std::string Message(int err, const std::string& step) { return BwrapMessage(ErrnoStatus(err, step)); }

TEST(BwrapMessage, StepsWithADetail) {
  EXPECT_EQ(Message(ENOENT, "execve(foo)"), "execvp foo: No such file or directory");
  EXPECT_EQ(Message(EACCES, "mkdir(/x)"), "Can't mkdir /x: Permission denied");
  EXPECT_EQ(Message(EPERM, "switch to uid(5)"), "unable to switch to uid 5: Operation not permitted");
}

TEST(BwrapMessage, FilesystemMountsNameTheFilesystemAndTheStagingPath) {
  EXPECT_EQ(Message(EPERM, "mount(proc)(/proc)"), "Can't mount proc on /newroot/proc: Operation not permitted");
  EXPECT_EQ(Message(ENOSPC, "mount(tmpfs)(/tmp)"), "Can't mount tmpfs on /newroot/tmp: No space left on device");
  EXPECT_EQ(Message(EINVAL, "mount(bind)(/ws)"), "Can't bind mount on /newroot/ws: Invalid argument");
  EXPECT_EQ(Message(EPERM, "mount(remount read-only)(/usr)"),
            "Can't remount readonly on /newroot/usr: Operation not permitted");
  EXPECT_EQ(Message(EPERM, "mount(root tmpfs)(/)"), "Can't mount tmpfs on /newroot: Operation not permitted");
}

// The supplied programs are loaded as bwrap loads them, and a failure is
// worded as bwrap words it: its hint for EINVAL.
TEST(BwrapMessage, SuppliedSeccompPrograms) {
  EXPECT_EQ(Message(EPERM, "prctl(PR_SET_SECCOMP)"), "prctl(PR_SET_SECCOMP): Operation not permitted");
  EXPECT_EQ(Message(EINVAL, "prctl(PR_SET_SECCOMP)"), kBwrapSeccompEinval);
}

// bwrap 0.11 names a failed overlay mount by its options (escaped), and
// words ELOOP as what it means. Without one overlay at that destination,
// the generic words.
TEST(BwrapMessage, OverlayMountsNameTheirOptions) {
  runtime::SandboxSpec spec;
  rootfs::MountOp overlay;
  overlay.kind = rootfs::MountKind::kOverlay;
  overlay.dest = "/ov";
  overlay.lower = {"/a", "/b,c"};
  overlay.upper = "/up";
  overlay.work = "/work";
  spec.mounts.push_back(overlay);
  const absl::Status loop = ErrnoStatus(ELOOP, "mount(overlay)(/ov)");
  EXPECT_EQ(BwrapMessage(loop, &spec),
            "Can't make overlay mount on /newroot/ov with options upperdir=/oldroot/up,workdir=/oldroot/work,"
            "lowerdir=/oldroot/b\\,c:/oldroot/a,userxattr: Overlay directories may not overlap");
  EXPECT_EQ(BwrapMessage(ErrnoStatus(EACCES, "mount(overlay)(/ov)"), &spec),
            "Can't make overlay mount on /newroot/ov with options upperdir=/oldroot/up,workdir=/oldroot/work,"
            "lowerdir=/oldroot/b\\,c:/oldroot/a,userxattr: Permission denied");
  EXPECT_EQ(BwrapMessage(loop), "Can't mount overlay on /newroot/ov: Too many levels of symbolic links");
  spec.mounts.push_back(overlay);
  EXPECT_EQ(BwrapMessage(loop, &spec), "Can't mount overlay on /newroot/ov: Too many levels of symbolic links");
}

TEST(BwrapMessage, JoinedNamespacesUseBwrapsTexts) {
  EXPECT_EQ(Message(EBADF, "join user namespace(fd 9)"), "Joining specified user namespace failed: Bad file descriptor");
  EXPECT_EQ(Message(EINVAL, "join user namespace(fd 3)"),
            "Joining the specified user namespace failed, it might not be a descendant of the current user "
            "namespace.");
  EXPECT_EQ(Message(EINVAL, "join pid namespace(fd 4)"), "Setting pidns failed: Invalid argument");
  EXPECT_EQ(Message(ENOMEM, "clone into the joined pid namespace"),
            "Can't fork for --pidns: Cannot allocate memory");
  EXPECT_EQ(Message(EPERM, "join user namespace after setup(fd 4)"),
            "Setting userns2 failed: Operation not permitted");
}

TEST(BwrapMessage, OtherMessagesPassUnchanged) {
  EXPECT_EQ(BwrapMessage(absl::InvalidArgumentError("no colon here")), "no colon here");
  EXPECT_EQ(BwrapMessage(absl::InvalidArgumentError("a: b: c")), "a: b: c") << "b is no errno name";
  EXPECT_EQ(Message(EIO, "some step"), "some step: Input/output error");
}

}  // namespace
}  // namespace cubicle::cli
