# The Python package (python/): pytest on the build tree's package
# (build/python/selq, SELQ_BUILD_PYTHON=ON), against the CLI of the same build.
# A test pytest skips (a reference package missing: importorskip) fails the run
# under CI=true, as every other skip does.
if(SELQ_BUILD_PYTHON)
  add_test(NAME python_api
           COMMAND sh -c "out=$(\"$0\" -m pytest -q -rs -p no:cacheprovider \"$1\" 2>&1); rc=$?; printf '%s\\n' \"$out\"; if [ $rc -eq 0 ] && [ \"$CI\" = true ] && printf '%s\\n' \"$out\" | grep -Eq '[0-9]+ skipped'; then echo 'FAIL: tests skipped under CI=true'; exit 1; fi; exit $rc"
                   ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_api PROPERTIES LABELS python TIMEOUT 600
    ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;SELQ_CLI=$<TARGET_FILE:selq>;SELQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()
