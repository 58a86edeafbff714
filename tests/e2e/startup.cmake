# libcurl and the BLAS are opened on first use (src/core/shared_library.h):
# linked into the binary again, they would cost every command ~25 ms of
# relocations and OpenBLAS a spinning thread during quantize. This fails if
# either comes back as a NEEDED entry of the selq binary.
add_test(NAME e2e_startup_links_no_curl_or_blas
         COMMAND ${CMAKE_COMMAND} -DOBJDUMP=${CMAKE_OBJDUMP} -DBINARY=$<TARGET_FILE:selq>
                 "-DFORBIDDEN=${SELQ_CURL_SONAME};${SELQ_BLAS_SONAME}"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cmake/check_needed.cmake)
set_tests_properties(e2e_startup_links_no_curl_or_blas PROPERTIES LABELS e2e TIMEOUT 60)
