// `cubicle __fork-server`: the process a daemon's pool starts to make its
// zygotes (runtime/fork_server.h). Its setup is the daemon's config text,
// parsed here as the daemon parsed it, so that both hold the same recipes.
#pragma once

namespace cubicle::rpc {

// Serves on `socket_fd` until the daemon hangs up or dies; the exit status.
int ForkServerMain(int socket_fd);

}  // namespace cubicle::rpc
