# Run by tests/e2e/startup.cmake (kept one level down: tests/*/*.cmake are test registrations).
# cmake -DOBJDUMP=... -DBINARY=... -DFORBIDDEN="a.so.1;b.so.2" -P check_needed.cmake
# Fails when BINARY lists any of FORBIDDEN among its NEEDED shared libraries.
execute_process(COMMAND ${OBJDUMP} -p ${BINARY} OUTPUT_VARIABLE dump RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "objdump -p ${BINARY} failed (${rc})")
endif()
string(REGEX MATCHALL "NEEDED[ \t]+[^ \t\r\n]+" needed "${dump}")
if(NOT needed)
  message(FATAL_ERROR "${BINARY}: no NEEDED entries found; is it a dynamic executable?")
endif()
foreach(lib ${FORBIDDEN})
  foreach(entry ${needed})
    if(entry MATCHES "[ \t]${lib}$")
      message(FATAL_ERROR "${BINARY} links ${lib} at start-up; it should be opened on first use")
    endif()
  endforeach()
endforeach()
message(STATUS "${BINARY}: ${needed}")
