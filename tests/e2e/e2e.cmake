# End-to-end tests: the selq binary on synthetic checkpoints, checked from
# Python (safetensors, numpy) so that the output is read by a second reader.
foreach(script test_main_job test_shipped_recipes test_output_hashes test_resume test_memory test_static_activation test_requantize)
  add_test(NAME e2e_${script}
           COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/${script}.py
           --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
  set_tests_properties(e2e_${script} PROPERTIES LABELS e2e TIMEOUT 900)
endforeach()

# The README's commands as a user copies them: the demo from a copy of the tree
# with no ../shared beside it and no network, and every command the README shows.
add_test(NAME e2e_demo_bare_clone
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/demo_bare_clone.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:selq>)
set_tests_properties(e2e_demo_bare_clone PROPERTIES LABELS e2e TIMEOUT 900)
add_test(NAME e2e_readme_commands
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_readme_commands.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_readme_commands PROPERTIES LABELS e2e TIMEOUT 300)
