# End-to-end tests: the selq binary on synthetic checkpoints, checked from
# Python (safetensors, numpy) so that the output is read by a second reader.
foreach(script test_main_job test_shipped_recipes test_output_hashes test_resume test_memory test_static_activation test_unreached_experts test_requantize test_rounding test_gptq test_serve)
  add_test(NAME e2e_${script}
           COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/${script}.py
           --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
  set_tests_properties(e2e_${script} PROPERTIES LABELS e2e TIMEOUT 900)
endforeach()
# NVFP4's, MXFP4's and INT4 g64's three roundings judged on three held-out domains (and
# WikiText-2 where ../shared/data has it), the demo's gptq row, kill and resume: 29.7 min
# under ctest -j2 beside a Qwen GPTQ run on the Intel VM (2026-12-07), about half alone.
set_tests_properties(e2e_test_gptq PROPERTIES TIMEOUT 2400)
# COST: about the seconds a test takes on CI's 2 cores. A fresh clone has no timing
# history, so without it ctest -j starts tests in the order they are added and the
# longest could start last, beside nothing; with it, the longest start first.
set_tests_properties(e2e_test_gptq PROPERTIES COST 600)

# Checkpoints other tools published (AMD Quark 0.13 run here, DeepSeek's native
# block FP8, transformers-5 configs) through every subcommand; ~3 min, most of
# it Quark's import and run, hence PROCESSORS 2.
add_test(NAME e2e_test_published_sources
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_published_sources.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_test_published_sources PROPERTIES LABELS e2e TIMEOUT 900 PROCESSORS 2)
# The same for checkpoints llm-compressor 0.14 and ModelOpt 0.47 make in the test
# (the peers venv, bench/peers/setup_peers.sh); ~80 s. Skips (77) without the
# peers, fails under CI=true.
add_test(NAME e2e_test_peer_sources
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_peer_sources.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_test_peer_sources PROPERTIES LABELS e2e TIMEOUT 900 PROCESSORS 2 SKIP_RETURN_CODE 77)

# The README's commands as a user copies them: the demo then test.sh's setup and
# configure, in that order, in a copy of the tree with no ../shared beside it (the
# demo offline, its configure before Open MPI is visible; test.sh's configure must
# then build with MPI; ~2 min), and every command the README shows.
add_test(NAME e2e_demo_bare_clone
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/demo_bare_clone.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:selq>)
set_tests_properties(e2e_demo_bare_clone PROPERTIES LABELS e2e TIMEOUT 1800 COST 330)
add_test(NAME e2e_readme_commands
         COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_readme_commands.py
         --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_readme_commands PROPERTIES LABELS e2e TIMEOUT 300)
