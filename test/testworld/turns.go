package testworld

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TakeTurns holds the machine-wide lock name until tb ends: tests of
// different packages that build the same binaries for other platforms
// (the image's and the release's) take turns, so that the second finds
// Go's build cache warm instead of compiling the same packages beside the
// first.
func TakeTurns(tb testing.TB, name string) {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "mh-"+name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatalf("open the lock %s: %v", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		tb.Fatalf("take the lock %s: %v", name, err)
	}
	tb.Cleanup(func() { f.Close() }) // closing releases it
}
