# Remote checkpoints over HTTP range requests (nginx and a faulty Python
# server on 127.0.0.1, a token-checking hub on 127.0.0.1 redirecting to a CDN
# on 127.0.0.2, all started and stopped by the test).
add_test(NAME e2e_test_remote
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_remote.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_test_remote PROPERTIES LABELS e2e TIMEOUT 900)
