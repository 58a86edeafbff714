"""selq.serve(): a checkpoint behind selq's OpenAI-style endpoints, in this process
(docs/SERVE.md), for lm-evaluation-harness or any OpenAI client."""
import os
from typing import Optional, Union

from . import _selq

PathLike = Union[str, "os.PathLike[str]"]


class Server:
    """A running ``selq serve``: ``url`` (``http://HOST:PORT``), ``base_url``
    (``.../v1/completions``, what lm-eval's ``local-completions`` takes), and
    ``stop()`` (requests being answered finish first). A context manager."""

    def __init__(self, handle: "_selq.ServerHandle", host: str):
        self._h = handle
        self.port: int = handle.port
        self.url = f"http://{host}:{self.port}"
        self.base_url = self.url + "/v1/completions"

    @property
    def running(self) -> bool:
        return self._h.running

    def stop(self) -> None:
        self._h.stop()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<selq.Server {self._h.description} at {self.url}{'' if self.running else ', stopped'}>"


def serve(checkpoint: PathLike, *, host: str = "127.0.0.1", port: int = 0, model_name: Optional[str] = None,
          slots: int = 16, queue: int = 256, timeout: int = 600) -> Server:
    """Serve ``checkpoint`` (any checkpoint ``selq.eval`` runs, in its stored formats)
    on ``host:port`` (0: a free port) and return at once; the model runs on
    threads of its own. ``slots``: sequences decoded together; ``queue``: how many
    more may wait (then 503); ``timeout``: seconds a request waits (then 504)::

        with selq.serve("out/nvfp4") as s:
            # lm_eval --model local-completions --model_args base_url=<s.base_url>,model=nvfp4
            ...
    """
    handle = _selq.ServerHandle(os.fspath(checkpoint), host, int(port), model_name or "", int(slots), int(queue),
                                int(timeout))
    return Server(handle, host)
