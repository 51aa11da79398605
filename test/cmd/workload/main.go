// Command workload is the test world's stand-in for a training job on a
// real node: it records, in a file of its own on the host, when it
// started, every change of the maintenance notice its downward API volume
// shows, when it checkpointed, and when SIGTERM arrived. Tests read the
// record to see what a process in a container really met.
//
// Environment:
//
//	RECORD      the record file (a hostPath volume); required
//	NOTICE      the notice file (default /etc/maintenance/notice)
//	ON_SIGTERM  "exit" to exit at once, else keep running until SIGKILL
//	            (a process that uses its whole grace)
//
// Each record line is "EVENT UNIX_NANOS [DETAIL]"; events are start,
// notice (DETAIL: the file's lines joined by ';'), checkpoint (the first
// time the notice says the maintenance starts, with MAINTENANCE_EVICT_AT
// as DETAIL) and sigterm.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	path := os.Getenv("RECORD")
	if path == "" {
		fmt.Fprintln(os.Stderr, "workload: RECORD is not set")
		os.Exit(2)
	}
	rec, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
	record := func(event, detail string) {
		line := fmt.Sprintf("%s %d", event, time.Now().UnixNano())
		if detail != "" {
			line += " " + detail
		}
		fmt.Fprintln(rec, line)
		fmt.Println(line)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	record("start", "")

	notice := os.Getenv("NOTICE")
	if notice == "" {
		notice = "/etc/maintenance/notice"
	}
	exit := os.Getenv("ON_SIGTERM") == "exit"
	last, checkpointed := "", false
	// The downward API replaces the file's folder atomically; reading it
	// every 10 ms sees each change within 10 ms.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			record("sigterm", "")
			if exit {
				return
			}
		case <-tick.C:
			data, _ := os.ReadFile(notice)
			text := strings.Join(strings.Fields(string(data)), ";")
			if text == last {
				continue
			}
			last = text
			record("notice", text)
			if evictAt := field(text, "MAINTENANCE_EVICT_AT"); !checkpointed && evictAt != "" && field(text, "MAINTENANCE_PHASE") == "starting" {
				checkpointed = true
				record("checkpoint", evictAt)
			}
		}
	}
}

// field is the value of KEY=VALUE among the notice's ';'-joined lines.
func field(text, key string) string {
	for _, kv := range strings.Split(text, ";") {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
