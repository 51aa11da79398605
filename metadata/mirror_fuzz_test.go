package metadata

import (
	"net/url"
	"testing"
)

// FuzzMirrorQuery: whatever a pod asks the notice endpoint, a query that
// is taken holds the long poll between no time and MaxMirrorHang, and
// answers as text or JSON.
func FuzzMirrorQuery(f *testing.F) {
	for _, s := range []string{"", "wait_for_change=true&last_etag=0123456789abcdef&timeout_sec=30&alt=json", "alt=text", "timeout_sec=-1",
		"timeout_sec=99999999999999", "timeout_sec=9223372036", "timeout_sec=9223372037", "wait_for_change=maybe", "recursive=true", "alt=xml"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		_, hang, alt, err := mirrorQuery(q)
		if err != nil {
			return
		}
		if hang < 0 || hang > MaxMirrorHang || alt != "" && alt != "text" && alt != "json" {
			t.Errorf("mirrorQuery(%q): hang %s, alt %q", raw, hang, alt)
		}
	})
}
