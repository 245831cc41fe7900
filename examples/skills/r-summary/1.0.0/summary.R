# what: an R skill: the count, mean and standard deviation of its numbers
# method: summary
# params: {"numbers": [2, 4, 4, 4, 5, 5, 7, 9]}
#
# The skill protocol, as in Python: one JSON-RPC request line on stdin, one
# response line (matching id) on stdout; stderr comes back as logs. With
# jsonlite (r-cran-jsonlite) it reads any request; without, the one shape
# this skill takes: {"id": N, ..., "params": {"numbers": [a, b, ...]}}.
con <- file("stdin")
open(con)
line <- readLines(con, n = 1L)
if (requireNamespace("jsonlite", quietly = TRUE)) {
  request <- jsonlite::fromJSON(line)
  id <- request$id
  x <- as.numeric(unlist(request$params$numbers))
} else {
  id <- as.numeric(sub('.*"id": *([0-9]+).*', "\\1", line))
  x <- as.numeric(strsplit(sub('.*"numbers": *\\[([^]]*)\\].*', "\\1", line), ",")[[1]])
}
message("summarising ", length(x), " numbers")
cat(sprintf('{"jsonrpc":"2.0","id":%.0f,"result":{"n":%d,"mean":%.10g,"sd":%.10g}}\n',
            id, length(x), mean(x), sd(x)))
