"""Container HEALTHCHECK: the broker's admin /healthz answers 200 (registered, not stopping).

The admin port is the one in KAFKALITE_CFG_ADMIN_LISTENER when set, else 9292."""

import os
import sys
import urllib.request

listener = os.environ.get("KAFKALITE_CFG_ADMIN_LISTENER", "0.0.0.0:9292")
port = listener.rsplit(":", 1)[-1]
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as r:
        sys.exit(0 if r.status == 200 else 1)
except OSError as e:
    print(f"healthz: {e}", file=sys.stderr)
    sys.exit(1)
