// The host's own interpreters, as a sandbox built from the host's system
// folders would see them (docs/skills.md, "Environments"): the files a run
// in an environment with an interpreter of its own finds masked, and the
// folders the host's python3 imports packages from, which a skill's
// `requires` is checked against when it runs on the host's interpreter.
// Read from the host at each load (start, SIGHUP).
#pragma once

#include <string>
#include <vector>

namespace cubicle::environments {

// Where the interpreters are looked for, in a sandbox's PATH order.
inline const std::vector<std::string>& InterpreterFolders() {
  static const std::vector<std::string> folders = {"/usr/local/bin", "/usr/bin", "/bin"};
  return folders;
}

// python, python3, python3.11, python3.11-config, python3-config, pip,
// pip3, pip3.11, R, Rscript: the names an interpreter is masked under.
bool IsInterpreterName(const std::string& name);

struct HostPython {
  // Each interpreter file in `folders` (real paths, symlinks resolved,
  // each once): what a mask covers wherever the sandbox shows it.
  std::vector<std::string> interpreter_files;
  // The host python3's site folders (real paths that exist), in its
  // sys.path order: for each prefix, lib/python3/dist-packages and
  // lib/python3.X/dist-packages (Debian's), then lib/python3.X/site-packages
  // (everyone else's). Empty when no python3 is found.
  std::vector<std::string> site_folders;
  std::string python_version;  // "3.11": the first python3 of `folders`; "" when none
};

// What `folders` hold (InterpreterFolders() on a real host), and the site
// folders under `prefixes` of the first python3 found there.
HostPython FindHostPython(const std::vector<std::string>& folders = InterpreterFolders(),
                          const std::vector<std::string>& prefixes = {"/usr/local", "/usr"});

}  // namespace cubicle::environments
