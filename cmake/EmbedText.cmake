# cubicle_embed_text(VAR SOURCE OUTPUT COMMENT): a build step that writes
# SOURCE (relative to the calling directory) as one C++ raw string literal
# into ${CMAKE_CURRENT_BINARY_DIR}/generated/OUTPUT (embed_text.cmake), for
# a source file to #include as a constant; VAR names the generated file,
# to list among a target's sources.
function(cubicle_embed_text var source output comment)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated/${output})
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_CURRENT_SOURCE_DIR}/${source} -DOUT=${out}
            -P ${PROJECT_SOURCE_DIR}/cmake/embed_text.cmake
    DEPENDS ${source} ${PROJECT_SOURCE_DIR}/cmake/embed_text.cmake
    COMMENT "${comment}")
  set(${var} ${out} PARENT_SCOPE)
endfunction()
