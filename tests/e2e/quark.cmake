# Seed 003's AMD Quark script against kimi-k3-mxfp4-attnfp8 on a small synthetic
# Kimi-K3 (bench/quark/run.sh): every tensor and config difference must be one
# compare.py --check explains. amd-quark comes from the test venv (scripts/setup.sh
# test); skips (77) without it, fails under CI=true. 25-40 s, most of it Quark's
# import, hence PROCESSORS 2.
add_test(NAME e2e_quark_seed003
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/quark/run.sh $<TARGET_FILE:selq>)
set_tests_properties(e2e_quark_seed003 PROPERTIES LABELS e2e SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS 2)
