"""Client for the nodes' control API (Unix socket locally, TCP in containers), with the run's token."""
from __future__ import annotations

import asyncio
from typing import Any

import aiohttp


class NodeError(RuntimeError):
    def __init__(self, node_id: str, message: str):
        self.node_id = node_id
        super().__init__(f"{node_id}: {message}")


class ControlClient:
    """`url` is the node's base URL (containers), or an API server's proxy URL for the pod with
    `headers` and `ssl` authenticating to it (Kubernetes); the node token travels in X-Peerlab-Token."""

    def __init__(self, node_id: str, token: str, unix: str | None = None, url: str | None = None,
                 headers: dict[str, str] | None = None, ssl: Any = None):
        self.node_id = node_id
        self._headers = {**(headers or {}), "X-Peerlab-Token": token}
        self._base = url.rstrip("/") if url else "http://node"
        self._unix = unix
        self._ssl = ssl
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = (aiohttp.UnixConnector(path=self._unix) if self._unix
                         else aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True))
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
        return self._session

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      timeout: float = 10.0) -> dict[str, Any]:
        try:
            async with self._sess().request(method, self._base + path, json=body,
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                data = await resp.json(content_type=None)
                if resp.status != 200:
                    raise NodeError(self.node_id, f"{method} {path} -> {resp.status}: {data.get('error', data)}")
                return data
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
            raise NodeError(self.node_id, f"{method} {path} failed: {err.__class__.__name__} {err}") from None

    async def get(self, path: str, **kw: Any) -> dict[str, Any]:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return await self.request("POST", path, body or {}, **kw)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
