# selq report in a real browser (headless Chromium, tests/e2e/browser.py) on the
# real SmolLM2 and a Kimi-K3-shaped synthetic; screenshots go to report-screenshots/.
# Skips (77) locally without chromium or the model, fails under CI=true.
add_test(NAME e2e_report_browser
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_report_browser.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR}
         --screenshots ${PROJECT_BINARY_DIR}/report-screenshots)
set_tests_properties(e2e_report_browser PROPERTIES LABELS e2e SKIP_RETURN_CODE 77 TIMEOUT 600)
