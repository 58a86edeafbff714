# Codec cross-check: a driver dumps selq's reference codec outputs, a Python
# script compares them bit for bit with ml_dtypes / torch and ports of the
# torchao and compressed-tensors scale formulas.
add_executable(crosscheck_codecs_dump ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/codecs_dump.cpp)
target_link_libraries(crosscheck_codecs_dump PRIVATE selq::all)
add_test(NAME crosscheck_codecs
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/codecs_crosscheck.py
                 $<TARGET_FILE:crosscheck_codecs_dump>)
set_tests_properties(crosscheck_codecs PROPERTIES LABELS crosscheck TIMEOUT 300)
