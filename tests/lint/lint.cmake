# Code-shape checks that need no build: no function longer than ~80 lines
# without its reason written above it (docs/ARCHITECTURE.md, "Code").
add_test(NAME lint_function_lengths
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/function_lengths.py --max 80
                 ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/python/src)
set_tests_properties(lint_function_lengths PROPERTIES LABELS lint)
# Each module includes only the modules its selq_module() line in src/CMakeLists.txt
# names (transitively), and those lines form no cycle: the rooms stay rooms.
add_test(NAME lint_module_layers
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/module_layers.py ${PROJECT_SOURCE_DIR}/src/CMakeLists.txt
                 ${PROJECT_SOURCE_DIR}/src)
set_tests_properties(lint_module_layers PROPERTIES LABELS lint)
