# Writes the text of IN as one C++ raw string literal into OUT, so a source
# file can `#include` it as a constant (the warm-interpreter bootstrap).
file(READ "${IN}" content)
string(FIND "${content}" ")CUBICLE_EMBED\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter")
endif()
file(WRITE "${OUT}.tmp" "R\"CUBICLE_EMBED(${content})CUBICLE_EMBED\"\n")
file(RENAME "${OUT}.tmp" "${OUT}")
