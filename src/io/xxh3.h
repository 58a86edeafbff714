#pragma once
// XXH3-64, selq's fingerprint hash (manifest, journal, verify), included from
// here rather than from <xxhash.h> directly. Debian's libxxhash is built for
// baseline x86-64 (SSE2); where it exports its run-time dispatchers, the
// XXH3_64bits* names below resolve to them: the same values, computed with
// AVX2/AVX-512 when the CPU has them (2.7x on cached data, 1.2x from memory;
// hashing was an eighth of a page-cached quantize run).
#include <xxhash.h>
#if SELQ_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif
