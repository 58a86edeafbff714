# The Python package (python/): pytest on the build tree's package
# (build/python/selq, SELQ_BUILD_PYTHON=ON), against the CLI of the same build.
if(SELQ_BUILD_PYTHON)
  add_test(NAME python_api
           COMMAND ${SELQ_PYTHON} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_api PROPERTIES LABELS python TIMEOUT 600
    ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;SELQ_CLI=$<TARGET_FILE:selq>;SELQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()
