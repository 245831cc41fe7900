# Writes `CUBICLE serve --print-default-config` to OUT: the configuration
# the packages install is the one the binary has built in.
execute_process(COMMAND "${CUBICLE}" serve --print-default-config
                OUTPUT_FILE "${OUT}.tmp" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  file(REMOVE "${OUT}.tmp")
  message(FATAL_ERROR "${CUBICLE} serve --print-default-config: ${status}")
endif()
file(RENAME "${OUT}.tmp" "${OUT}")
