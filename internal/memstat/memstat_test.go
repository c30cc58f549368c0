package memstat

import (
	"runtime"
	"testing"
)

func TestHeapAllocSeesALiveAllocation(t *testing.T) {
	before := HeapAlloc()
	b := make([]byte, 8<<20)
	after := HeapAlloc()
	runtime.KeepAlive(b)
	// Other goroutines may free a little meanwhile (a CI run saw 16 bytes
	// short of 8 MiB): the 8 MiB must show, less 64 KiB.
	if after-before < 8<<20-64<<10 {
		t.Fatalf("heap %d -> %d with 8 MiB live", before, after)
	}
	if runtime.GOOS == "linux" && RSS() <= 0 {
		t.Fatal("no RSS on linux")
	}
}
