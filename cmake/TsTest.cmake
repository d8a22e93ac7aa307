# ts_add_test(NAME SOURCES... LIBS libs...): a GoogleTest binary registered with CTest.
# Tests run from the build folder; TS_SHARED_DIR points at ../shared (read-only data) and
# TS_SOURCE_DIR at the repository.
function(ts_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    TS_SHARED_DIR="${TS_SHARED_DIR}" TS_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    TS_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()
