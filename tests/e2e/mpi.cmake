# selq under mpirun (Open MPI): byte-identity with a single-process run for
# 1-3 ranks, a failing and a killed rank and the reruns that resume them, in
# place, and the sensitivity pass. Skipped (not failed) in a build without MPI.
if(SELQ_WITH_MPI)
  add_test(NAME e2e_mpi
           COMMAND ${SELQ_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_mpi.py
           --selq $<TARGET_FILE:selq> --source-dir ${PROJECT_SOURCE_DIR} --mpirun ${MPIEXEC_EXECUTABLE})
  set_tests_properties(e2e_mpi PROPERTIES LABELS e2e TIMEOUT 600)
else()
  add_test(NAME e2e_mpi COMMAND ${CMAKE_COMMAND} -E echo "selq was built without MPI (SELQ_WITH_MPI=OFF): skipped")
  set_tests_properties(e2e_mpi PROPERTIES LABELS e2e SKIP_REGULAR_EXPRESSION "skipped")
endif()
