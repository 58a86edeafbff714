# Cross-check of the compressed-tensors configs selq writes against the
# compressed-tensors library itself (pydantic models and matching utilities).
add_executable(selq_dialects_driver ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/dialects_driver.cpp)
target_include_directories(selq_dialects_driver PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit/export)
target_link_libraries(selq_dialects_driver PRIVATE selq::all)
add_test(NAME crosscheck_dialects
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/dialects.py $<TARGET_FILE:selq_dialects_driver>)
set_tests_properties(crosscheck_dialects PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77)
