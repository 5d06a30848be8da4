# Compile each generated typesupport library of this package as a few unity (jumbo) sources
# instead of one translation unit per interface: the generated files are small and each one
# re-parses the same rosidl / Fast CDR headers, so the headers dominate the build.
# rosidl_generator_c is left as it is: its *__description.c files define the same
# file-scope symbols for shared dependencies and do not combine.
function(real2sim2real_unity_typesupports)
  set(_suffixes
    __rosidl_typesupport_c __rosidl_typesupport_cpp
    __rosidl_typesupport_fastrtps_c __rosidl_typesupport_fastrtps_cpp
    __rosidl_typesupport_introspection_c __rosidl_typesupport_introspection_cpp
    __rosidl_generator_py)
  foreach(_s IN LISTS _suffixes)
    if(TARGET ${PROJECT_NAME}${_s})
      set_target_properties(${PROJECT_NAME}${_s} PROPERTIES UNITY_BUILD ON)
      # Each generated file declares its dependencies' functions again: harmless, but GCC
      # says so for every pair once they share a translation unit.
      if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
        target_compile_options(${PROJECT_NAME}${_s} PRIVATE
          $<$<COMPILE_LANGUAGE:CXX>:-Wno-redundant-decls>)
      endif()
    endif()
  endforeach()
endfunction()
