# DeepSeek-V3 runtime vs transformers' DeepseekV3ForCausalLM on small random
# configs (groups, shared experts, dense-first layers, YaRN in both config
# forms, q_lora_rank set and null) and one quantized checkpoint; prefill and
# KV-cache decode. Uses runtime_logits (runtime.cmake). Needs: torch,
# transformers, safetensors, numpy, ml_dtypes in the venv. ~15 s.
add_test(NAME crosscheck_deepseek_runtime
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/deepseek_crosscheck.py
          $<TARGET_FILE:runtime_logits> $<TARGET_FILE:selq> ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_deepseek_runtime)
set_tests_properties(crosscheck_deepseek_runtime PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 180)
