// Command notice waits for this node's maintenance notice, as a training
// loop would. The node's maintenance-handler agent serves the notice at
// MAINTENANCE_NOTICE_URL (http://$(HOST_IP):8189 in the pod's env). It
// reads the key first, so a notice already pending is not missed, then
// waits for each change with last_etag. Standard library only.
//
//	notice [KEY]   (default instance/upcoming-maintenance)
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	base := strings.TrimSuffix(os.Getenv("MAINTENANCE_NOTICE_URL"), "/") + "/computeMetadata/v1/"
	key := "instance/upcoming-maintenance"
	if len(os.Args) > 1 {
		key = os.Args[1]
	}
	client := &http.Client{Timeout: 330 * time.Second}
	etag := ""
	for {
		status, body, next, err := get(client, base+key, etag)
		switch {
		case err != nil: // the agent restarting: read again
			fmt.Fprintln(os.Stderr, "cannot reach the notice endpoint:", err)
			next = ""
			time.Sleep(5 * time.Second)
		case (status == http.StatusOK || status == http.StatusNotFound) && next != etag:
			// Plan a checkpoint here: the notice is JSON with
			// maintenance_status, window_start_time and window_end_time.
			if status == http.StatusNotFound {
				body = "none"
			}
			fmt.Println("notice:", body)
		case status != http.StatusOK && status != http.StatusNotFound: // 503: not read yet; 429: too many
			fmt.Fprintln(os.Stderr, "not yet:", status, strings.TrimSpace(body))
			time.Sleep(5 * time.Second)
		}
		etag = next
	}
}

// get reads url, or waits for it to change from etag when etag is set.
func get(client *http.Client, url, etag string) (status int, body, next string, err error) {
	if etag != "" {
		url += "?wait_for_change=true&timeout_sec=300&last_etag=" + etag
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("ETag"), err
}
