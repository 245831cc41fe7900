"""The readiness probe: GET /readyz with the monitoring key.

/readyz needs a key (docs/protocol.md, "HTTP") and a probe's httpHeaders
could only carry one in the clear in the pod's spec, readable by whoever
may read pods. So the kubelet runs this inside the container instead
(an exec probe): it reads the key from the Secret's file and asks the
daemon on the address it listens on. Exit 0 when ready (200), 1 when not
(503: a pool below its min_idle, or draining), 2 when it cannot ask.

Environment: CUBICLE_READYZ_URL (default http://127.0.0.1:8080/readyz;
the DaemonSet sets the node's address), CUBICLE_PROBE_KEY_FILE (default
/etc/cubicle/probe.key), CUBICLE_READYZ_TIMEOUT (seconds, default 3).
"""
import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    url = os.environ.get("CUBICLE_READYZ_URL", "http://127.0.0.1:8080/readyz")
    key_file = os.environ.get("CUBICLE_PROBE_KEY_FILE", "/etc/cubicle/probe.key")
    timeout = float(os.environ.get("CUBICLE_READYZ_TIMEOUT", "3"))
    try:
        with open(key_file) as f:
            key = f.read().strip()
    except OSError as e:
        print(f"readyz: {key_file}: {e.strerror}", file=sys.stderr)
        return 2
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            print(response.read(4096).decode("utf-8", "replace"))
            return 0
    except urllib.error.HTTPError as e:
        print(f"readyz: {e.code}: {e.read(4096).decode('utf-8', 'replace')}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"readyz: {url}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
