"""The ASGI application behind ``compressor serve`` (Starlette): /predict, /health, /ready, /metrics.

``create_app(folder, config)`` opens the export folder when the server starts (its lifespan),
so every worker process holds its own model, batcher and counters. Each request is logged as
one JSON line; refusals are a status code (400 bad JSON, 413 too large, 422 not understood)
with ``{"error": "one line"}``.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from compressor.serve.api import BadRequest, answers, parse_request
from compressor.serve.batcher import Batcher
from compressor.serve.config import ServeConfig
from compressor.serve.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("compressor.serve")

_PATHS = ("/predict", "/health", "/ready", "/metrics")


def open_model(folder: str, config: ServeConfig):
    """``(graph, labels, regression, alone, kind)`` for an export folder: the runtime's graph (a
    ``Predictor`` or, for early-exit segments, a ``SegmentChain``), the label names ``compressor
    predict`` writes, and whether texts run one at a time (see ``ServeConfig.rows``)."""
    from compressor.export.runtime import is_segments, open_graph, read_manifest

    manifest = read_manifest(os.path.join(folder, "manifest.json")) \
        if os.path.isfile(os.path.join(folder, "manifest.json")) else None
    graph = open_graph(folder, threads=config.threads)   # no manifest: the runtime's one-line error
    labels = graph.labels
    if manifest and manifest.get("task_spec"):
        from compressor.core.data import task_from_dict

        labels = task_from_dict(manifest["task_spec"]).label_names or labels
    precision = (manifest or {}).get("precision") or "fp32"
    alone = config.rows == "alone" or (config.rows == "auto" and precision == "int8-dynamic")
    kind = "early-exit segments" if is_segments(folder) else precision
    return graph, (list(labels) if labels else None), graph.regression, alone, kind


class _State:
    def __init__(self):
        self.ready = False
        self.batcher: Optional[Batcher] = None
        self.model = None


def create_app(folder: str, config: Optional[ServeConfig] = None, model=None) -> Starlette:
    """The application; ``model`` is what :func:`open_model` gave, where the caller opened it."""
    config = config or ServeConfig()
    metrics = Metrics()
    state = _State()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        configure_logging()
        state.model = model or open_model(folder, config)
        graph, _, _, alone, kind = state.model
        state.batcher = Batcher(graph, config.max_batch, config.max_wait_ms, alone, bucket=config.bucket,
                                on_batch=metrics.batch,
                                on_queue=lambda depth: setattr(metrics, "queue_depth", depth))
        state.batcher.start()
        state.ready = True
        log.info("ready", extra={"fields": {"event": "ready", "folder": folder, "kind": kind,
                                            "pid": os.getpid(), "max_batch": config.max_batch,
                                            "max_wait_ms": config.max_wait_ms, "bucket": config.bucket,
                                            "alone": alone}})
        try:
            yield
        finally:
            state.ready = False
            await state.batcher.stop()   # texts still queued are answered first
            log.info("stopped", extra={"fields": {"event": "stopped", "pid": os.getpid()}})

    async def predict(request: Request) -> Response:
        metrics.in_flight += 1
        try:
            return await _predict(request)
        finally:
            metrics.in_flight -= 1

    async def _predict(request: Request) -> Response:
        try:
            raw = await _body(request, config.max_body_bytes)
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise BadRequest(400, f"the body is not valid JSON ({_reason(exc)})", "bad_json") from None
            texts, single, parameters = parse_request(body, config.max_texts, config.max_chars)
        except BadRequest as exc:
            metrics.error(exc.kind)
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        request.state.texts = len(texts)
        _, labels, regression, _, _ = state.model
        try:
            logits = await state.batcher.submit(texts)
        except Exception as exc:   # the model failed on this batch: the server goes on
            metrics.error("model")
            log.error("model failed", extra={"fields": {"event": "model_error", "error": str(exc)[:500]}})
            return JSONResponse({"error": f"the model failed: {str(exc)[:300]}"}, status_code=500)
        return JSONResponse(answers(logits, labels, regression, single, parameters))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        if state.ready and state.batcher is not None and state.batcher.running:
            return JSONResponse({"status": "ready", "kind": state.model[4]})
        return JSONResponse({"status": "not ready"}, status_code=503)

    async def metrics_page(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    routes = [Route("/predict", predict, methods=["POST"]), Route("/health", health),
              Route("/ready", ready), Route("/metrics", metrics_page)]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    app.state.metrics = metrics
    return _Observed(app, metrics)


class _Observed:
    """ASGI middleware: each HTTP request counted (path, status, latency) and logged as JSON."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    def __getattr__(self, name):   # app.state, app.router, ... of the Starlette app
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = {"code": 499}   # no response started: the client went away

        async def observed_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        except ClientDisconnect:
            pass
        finally:
            seconds = time.perf_counter() - start
            path = scope.get("path", "")
            shown = path if path in _PATHS else "other"
            self.metrics.request(shown, status["code"], seconds)
            if status["code"] >= 500:
                self.metrics.error("server")
            client = scope.get("client")
            log.info("request", extra={"fields": {
                "event": "request", "method": scope.get("method"), "path": shown, "status": status["code"],
                "ms": round(seconds * 1000, 3), "texts": (scope.get("state") or {}).get("texts"),
                "client": f"{client[0]}:{client[1]}" if client else None}})


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past ``limit`` bytes before all of it is read."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise BadRequest(413, f"a body of {int(length)} bytes; at most {limit}", "too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"a body of more than {limit} bytes", "too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _reason(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return "not UTF-8 text"


class JsonLines(logging.Formatter):
    """One JSON object per line: time, level, message and the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": round(record.created, 3), "level": record.levelname.lower(),
                 "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(entry, default=str)


def configure_logging(stream=None) -> None:
    """The server's own lines and uvicorn's, as JSON lines on stderr (once per process)."""
    if getattr(configure_logging, "done", False):
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    for name in ("compressor.serve", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False
    configure_logging.done = True


def app_from_environment():
    """The application a worker process builds (``--workers`` above 1: uvicorn imports this)."""
    spec = json.loads(os.environ["COMPRESSOR_SERVE"])
    return create_app(spec["folder"], ServeConfig(**spec["config"]))
