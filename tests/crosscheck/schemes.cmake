# Scheme cross-check: a driver quantizes tensors written by the Python script,
# which compares every output byte with compressed-tensors (and numpy ports of
# ModelOpt / DeepSeek / torchao formulas where no package is installable).
add_executable(crosscheck_schemes_driver ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/schemes_driver.cpp)
target_link_libraries(crosscheck_schemes_driver PRIVATE selq::all)
add_test(NAME crosscheck_schemes
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/schemes_crosscheck.py
                 $<TARGET_FILE:crosscheck_schemes_driver>)
set_tests_properties(crosscheck_schemes PROPERTIES LABELS crosscheck TIMEOUT 600)
