"""`python -m stylus.deploy.healthcheck`: the container HEALTHCHECK, without curl in a slim image.

Exits 0 when the processor's metrics server answers 2xx on the path, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

DEFAULT_PORT = 9400


def check(port: int, path: str = "/healthz", host: str = "127.0.0.1", timeout: float = 3.0) -> tuple[bool, str]:
    url = f"http://{host}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 200 <= response.status < 300, f"{url}: {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"{url}: {exc.code}"
    except OSError as exc:
        return False, f"{url}: {exc}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("STYLUS_METRICS_PORT", DEFAULT_PORT)))
    parser.add_argument("--path", default="/healthz")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    ok, detail = check(args.port, args.path, timeout=args.timeout)
    print(detail, file=sys.stderr if not ok else sys.stdout)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
