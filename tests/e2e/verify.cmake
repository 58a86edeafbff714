# `selq verify` end to end: clean quantize outputs in every dialect, then one
# corrupted copy per finding kind.
add_test(NAME e2e_test_verify
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_verify.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_test_verify PROPERTIES LABELS e2e TIMEOUT 300)
