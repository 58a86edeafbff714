# Code-shape checks that need no build: no function longer than ~80 lines
# without its reason written above it (docs/ARCHITECTURE.md, "Code").
add_test(NAME lint_function_lengths
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/function_lengths.py --max 80
                 ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/python/src)
set_tests_properties(lint_function_lengths PROPERTIES LABELS lint)
