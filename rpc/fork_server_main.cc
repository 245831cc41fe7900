#include "rpc/fork_server_main.h"

#include <string>

#include "rpc/config.h"
#include "runtime/fork_server.h"

namespace cubicle::rpc {
namespace {

absl::StatusOr<runtime::ZygoteRecipes> RecipesFromConfig(const std::string& text) {
  absl::StatusOr<DaemonConfig> config = ParseConfig(text);
  if (!config.ok()) return config.status();
  runtime::ZygoteRecipes recipes;
  for (const auto& [name, profile] : config->profiles) recipes.emplace(name, ZygoteRecipeOf(*config, profile));
  return recipes;
}

}  // namespace

int ForkServerMain(int socket_fd) { return runtime::ServeForkServer(socket_fd, &RecipesFromConfig); }

}  // namespace cubicle::rpc
