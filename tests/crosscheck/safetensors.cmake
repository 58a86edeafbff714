# safetensors vs the Python `safetensors` package, both directions, every dtype
# (F6 only selq->Python: Python cannot write F6), plus malformed files that
# Python rejects must be rejected by selq too. Needs: safetensors, numpy.
add_executable(safetensors_tool ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/safetensors_tool.cpp)
target_link_libraries(safetensors_tool PRIVATE selq::all)
add_test(NAME crosscheck_safetensors
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/safetensors_crosscheck.py
          $<TARGET_FILE:safetensors_tool> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_safetensors)
set_tests_properties(crosscheck_safetensors PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 300)
