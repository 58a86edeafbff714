# Remote checkpoints over HTTP range requests (nginx and a faulty Python
# server, both on 127.0.0.1, started and stopped by the test).
add_test(NAME e2e_test_remote
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_remote.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_test_remote PROPERTIES LABELS e2e TIMEOUT 900)
