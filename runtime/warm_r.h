// Warm R interpreters (runtime/warm.h): a profile whose interpreter is
// {"argv": ["Rscript", "--vanilla"]} (or R, e.g. ["R", "--vanilla",
// "--slave"]) keeps R started — its default packages attached, the
// profile's preloads' namespaces loaded — and, with a template, forks each
// zygote's interpreter from one R.
//
// R cannot receive fds, join namespaces or load a seccomp filter itself:
// init passes it a small library (runtime/warm_r_library.cc, embedded in
// cubicle, in a sealed memfd as kRLibraryFd) that its bootstrap
// (runtime/warm_bootstrap.R, its -e program) loads with dyn.load. The
// library does what warm_bootstrap.py does for Python, then points R's
// console at the request's program, so that R's own top-level loop runs
// it and its output, warnings, errors and exit status are Rscript's.
//
// Served warm, for an Rscript interpreter with flags F: `Rscript F FILE
// ARGS`, `Rscript F -e EXPR [-e EXPR]... ARGS`, `Rscript F - ARGS` (the
// program on stdin), and the R skill launcher (kRSkillLauncher) when F is
// exactly --vanilla, which the library performs itself. For an interpreter
// named R: `R F` alone, the program on stdin (`R --vanilla --slave <
// prog.R`). Anything else is exec'd, as for Python.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "runtime/warm.h"

namespace cubicle::runtime {

// The fd number of the library in the R interpreter process.
inline constexpr int kRLibraryFd = 5;

// How an R skill runs (rpc's SkillArgv): `/bin/sh -c LAUNCHER NAME PROGRAM`
// writes PROGRAM to a file and runs `Rscript --vanilla FILE`, so that R
// reads it as a script (Rscript -e would stop at 10000 bytes, and report
// errors inside its own eval). Defined here because a warm R interpreter
// recognises this exact command line and does the same itself.
const char* RSkillLauncher();

// A package name as R spells one: a letter, then letters, digits and dots,
// not ending in a dot.
bool IsRPackageName(const std::string& name);

absl::Status ValidateRInterpreter(const WarmInterpreter& interpreter);
std::optional<WarmInvocation> MatchRInvocation(const WarmInterpreter& interpreter, const std::vector<std::string>& argv);
// `interpreter` running R `program` (its -e) with `args` as
// commandArgs(TRUE): Rscript passes them on itself, R needs --args first.
std::vector<std::string> RProgramCommandLine(const WarmInterpreter& interpreter, const std::string& program,
                                             const std::vector<std::string>& args);
std::vector<std::string> RWarmCommandLine(const WarmInterpreter& interpreter, int socket_fd);
std::vector<std::string> RTemplateCommandLine(const WarmInterpreter& interpreter, int socket_fd, int owner_fd);

// The library's bytes (a shared object, built with cubicle).
std::string_view RLibrary();

// A sealed memfd holding RLibrary(), close-on-exec, or -errno. Only
// syscalls: callable in a sandbox's child before its exec.
int RLibraryMemfd();

}  // namespace cubicle::runtime
