"""ctest fixture: `selq import-gguf` of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, from
scripts/fetch_qwen.sh) into DST, once for every Qwen test (the BF16 import is
3.5 GB and takes a while on two cores). Kept while it is newer than the GGUF and
complete (the import renames model.safetensors into place last).

usage: qwen_import.py SELQ_EXE DST
Exit 77 (ctest skip) when the GGUF is missing locally; under CI=true it fails.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xref import qwen_gguf  # noqa: E402


def main():
    selq, dst = sys.argv[1], pathlib.Path(sys.argv[2])
    gguf = qwen_gguf()
    st = dst / "model.safetensors"
    if st.is_file() and (dst / "config.json").is_file() and st.stat().st_mtime >= gguf.stat().st_mtime:
        print(f"reusing {dst} ({st.stat().st_size} bytes)")
        return 0
    t0 = time.perf_counter()
    r = subprocess.run([selq, "import-gguf", str(gguf), str(dst), "--force", "--json"],
                       check=True, capture_output=True, text=True)
    rep = json.loads(r.stdout)
    print(f"import-gguf {gguf} -> {dst}: {rep['tensors']} tensors {rep['source_types']}, "
          f"{rep['bytes_written']} bytes, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
