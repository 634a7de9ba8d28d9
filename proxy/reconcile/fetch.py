"""Reading the providers' admin APIs: one GET per page, following `has_more` / `next_page`.

The admin key travels only in the request's header. It is never put in a URL, a message,
a log or a file: any text from the provider that is shown (an error body) has it cut out.
Pages are decoded with exact decimals, so an amount the provider writes as a JSON number
(OpenAI's costs) never passes through a float.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode, urlsplit

from proxy.errors import ConfigError
from proxy.loopback import is_loopback

Params = list[tuple[str, str]]
# (url with query, headers) -> (status, body); tests and saved pages need no network.
Transport = Callable[[str, dict[str, str]], tuple[int, bytes]]

MAX_PAGES = 1000  # a month of daily buckets is a few pages; more means the cursor goes round
TIMEOUT_S = 60.0
MAX_PAGE_BYTES = 64 * 1024 * 1024  # a page of daily buckets is kilobytes; a bigger one is not a report


class ReconcileError(ConfigError):
    """The provider's API could not be read (unreachable, a refused key, a page that is not one).

    A ConfigError, so the command exits 2: exit 1 keeps meaning "differences over the threshold"."""


def admin_key(env: str, environ: dict[str, str] | None = None) -> str:
    """The admin key from the variable `[reconcile.X] admin_key_env` names; the message names the variable only."""
    value = (os.environ if environ is None else environ).get(env, "")
    if not value.strip():
        raise ConfigError(f"the admin key is read from the environment variable {env}, which is not set "
                          f"(or set [reconcile.*] admin_key_env to the variable that holds it)")
    return value.strip()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would send the admin key on to wherever a redirect points: a redirect is an answer."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(scheme: str) -> urllib.request.OpenerDirector:
    """https may go through the environment's proxy (a CONNECT tunnel: the key stays inside TLS);
    plain http never does, or the key would reach the proxy in clear text: it goes straight to
    this machine, the only place plain http is sent."""
    if scheme == "https":
        return urllib.request.build_opener(_NoRedirect)
    return urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))


def urllib_transport(url: str, headers: dict[str, str], limit: int = MAX_PAGE_BYTES) -> tuple[int, bytes]:
    """GET with the admin key, only over https (or plain http straight to this machine, never
    through a proxy), never following a redirect; a page longer than `limit` bytes is refused,
    never held whole."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not is_loopback(parts.hostname)):
        raise ReconcileError(f"{parts.scheme}://{parts.hostname}: an admin key is only sent over https "
                             "(or to this machine)")
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with _opener(parts.scheme).open(request, timeout=TIMEOUT_S) as response:
            return int(response.status), _bounded(response, limit, url)
    except urllib.error.HTTPError as e:
        return e.code, _bounded(e, limit, url)


def _bounded(response: Any, limit: int, url: str) -> bytes:
    body: bytes = response.read(limit + 1)
    if len(body) > limit:
        raise ReconcileError(f"{urlsplit(url).hostname}: a page longer than {limit:,} bytes; not a usage or cost page")
    return body


def decode(body: bytes | str, where: str) -> Any:
    """A JSON document with every number exact (fractions as Decimal); NaN and Infinity refused."""
    try:
        return json.loads(body, parse_float=Decimal, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ReconcileError(f"{where}: not a JSON page ({e})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


class Client:
    """GETs pages of one provider's admin API with its key in the header it wants."""

    def __init__(self, provider: str, base_url: str, headers: dict[str, str], key_env: str, key: str,
                 transport: Transport | None = None) -> None:
        self.provider, self.base_url, self.key_env = provider, base_url.rstrip("/"), key_env
        self._headers = dict(headers)
        self._key = key  # cut out of anything shown
        self._transport = transport or urllib_transport

    def pages(self, path: str, params: Params) -> Iterator[tuple[str, dict[str, Any]]]:
        """(name, page) for every page of `path`, following next_page while has_more is true; the
        name (`openai /organization/costs page 2`) is how messages point at a page."""
        url = f"{self.base_url}{path}"
        cursor: str | None = None
        seen: set[str] = set()
        for n in range(1, MAX_PAGES + 1):
            query = params + ([("page", cursor)] if cursor is not None else [])
            doc = self._get(url, query, path)
            yield f"{self.provider} {path} page {n}", doc
            if doc.get("has_more") is not True:
                return
            cursor = doc.get("next_page")
            if not isinstance(cursor, str) or not cursor or cursor in seen:
                raise ReconcileError(f"{self.provider} {path}: has_more is true but next_page "
                                     f"{'repeats an earlier cursor' if cursor in seen else 'is missing'}; "
                                     "the pages cannot be followed")
            seen.add(cursor)
        raise ReconcileError(f"{self.provider} {path}: more than {MAX_PAGES} pages; stopped")

    def _get(self, url: str, query: Params, path: str) -> dict[str, Any]:
        full = f"{url}?{urlencode(query)}"
        host = urlsplit(url).netloc
        try:
            status, body = self._transport(full, self._headers)
        except OSError as e:  # URLError, timeouts and refused connections are all OSError
            reason = getattr(e, "reason", e)
            raise ReconcileError(f"{self.provider}: cannot reach {host} ({self._scrub(str(reason))})") from None
        if status in (401, 403):
            raise ReconcileError(f"{self.provider} {path}: HTTP {status}: the admin key from {self.key_env} was "
                                 f"refused ({self._said(body)}); an admin key is needed, not a project or API key")
        if status != 200:
            raise ReconcileError(f"{self.provider} {path}: HTTP {status} from {host} ({self._said(body)})")
        doc = decode(body, f"{self.provider} {path}")
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise ReconcileError(f"{self.provider} {path}: the answer has no `data` list; not a usage or cost page")
        return doc

    def _said(self, body: bytes) -> str:
        """The provider's error message, short, with the key cut out. Cut out first, then
        shortened: a cut through the key would leave its first characters past the scrubbing."""
        try:
            doc = json.loads(body)
            err = doc.get("error") if isinstance(doc, dict) else None
            text, limit = str(err.get("message") if isinstance(err, dict) else err or doc), 300
        except (ValueError, UnicodeDecodeError, RecursionError):
            text, limit = body.decode("utf-8", "replace"), 200
        return self._scrub(text)[:limit]

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "[redacted]") if self._key else text
