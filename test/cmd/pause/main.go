// Command pause is the sandbox image of the test world's real node: the
// process that holds a pod's namespaces. It waits for SIGTERM or SIGINT
// and exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
