#!/usr/bin/env python3
"""Waits for this node's maintenance notice, as a training loop would.

The node's maintenance-handler agent serves the notice at
MAINTENANCE_NOTICE_URL (http://$(HOST_IP):8189 in the pod's env). This
reads the key first, so a notice already pending is not missed, then
waits for each change with last_etag. Standard library only.
"""
import os
import sys
import time
import urllib.error
import urllib.request

BASE = os.environ["MAINTENANCE_NOTICE_URL"].rstrip("/") + "/computeMetadata/v1/"
KEY = sys.argv[1] if len(sys.argv) > 1 else "instance/upcoming-maintenance"


def get(etag):
    url = BASE + KEY
    if etag:
        url += "?wait_for_change=true&timeout_sec=300&last_etag=" + etag
    req = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=330) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("ETag", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("ETag", "")


etag = ""
while True:
    try:
        status, body, new = get(etag)
    except OSError as e:  # the agent restarting: read again
        print("cannot reach the notice endpoint:", e, file=sys.stderr, flush=True)
        etag = ""
        time.sleep(5)
        continue
    if status in (200, 404) and new != etag:
        # Plan a checkpoint here: the notice is JSON with
        # maintenance_status, window_start_time and window_end_time.
        print("notice:", body if status == 200 else "none", flush=True)
    elif status not in (200, 404):  # 503: not read yet; 429: too many
        print("not yet:", status, body.strip(), file=sys.stderr, flush=True)
        time.sleep(5)
    etag = new
