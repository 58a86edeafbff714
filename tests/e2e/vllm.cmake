# The real vLLM engine loads selq's outputs (tests/e2e/vllm.sh). Each engine
# start takes 20-60 s and both cores, hence PROCESSORS 2.
add_test(NAME e2e_vllm_loads_selq_outputs
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/vllm.sh $<TARGET_FILE:selq> ${SELQ_PYTHON} ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_vllm_loads_selq_outputs PROPERTIES LABELS e2e SKIP_RETURN_CODE 77 TIMEOUT 1200 PROCESSORS 2 COST 240)  # COST: e2e.cmake
