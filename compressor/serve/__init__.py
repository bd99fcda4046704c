"""``compressor serve``: an export folder behind HTTP, with dynamic batching (torch-free).

Public API:

- ``serve(folder, config=ServeConfig())`` (``compressor.serve.server``): listen until SIGTERM or
  Ctrl-C; finishes the requests in flight before it returns.
- ``create_app(folder, config)`` (``compressor.serve.app``): the ASGI application, for another
  ASGI server or a test client.
- ``ServeConfig`` (``compressor.serve.config``): host, port, batching, limits.

Needs the ``serve`` extra (starlette, uvicorn): ``pip install 'compressor[serve]'``. Nothing
here imports torch: the model runs on ``compressor.export.runtime``.
"""

_LAZY = {"serve": "server", "create_app": "app", "ServeConfig": "config"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"compressor.serve.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'compressor.serve' has no attribute {name!r}")
