# cubicle's warm R bootstrap (runtime/warm.h, "R"), passed to the
# interpreter as its -e program; runtime/warm_r_library.cc does the work.
# As `... -e <this> FD PACKAGE...` it is a warm zygote's interpreter; as
# `... -e <this> template FD OWNER PACKAGE...` a warm template's. It loads
# the library init passed as fd 5, loads each package's namespace (not
# attached: a script's own library() call attaches it, as in a fresh R;
# a failure is "E" and why), and hands over to the library, which returns
# only in the process that took a request. What follows the .C call runs
# there, then R's console reads the request's program.
local({
  args <- commandArgs(TRUE)
  args <- args[args != "--args"]
  template <- identical(args[1L], "template")
  fd <- as.integer(args[if (template) 2L else 1L])
  dyn.load("/proc/self/fd/5")
  for (name in args[-seq_len(if (template) 3L else 1L)]) {
    tryCatch(suppressWarnings(suppressMessages(loadNamespace(name))), error = function(e)
      .C("cubicle_r_fail", fd, paste0(name, ": ", conditionMessage(e))))
  }
  exe <- commandArgs()[1L]
  changed <- if (template) {
    .C("cubicle_r_template", fd, as.integer(args[3L]), exe, changed = 0L)$changed
  } else {
    .C("cubicle_r_serve", fd, exe, changed = 0L)$changed
  }
  if (exists(".Random.seed", envir = globalenv(), inherits = FALSE)) rm(".Random.seed", envir = globalenv())
  .libPaths(c(unlist(strsplit(Sys.getenv("R_LIBS"), ":")), unlist(strsplit(Sys.getenv("R_LIBS_USER"), ":"))))
  if (changed != 0L) invisible(Sys.setlocale("LC_ALL", ""))
  invisible()
})
