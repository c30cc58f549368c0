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
	if after-before < 8<<20 {
		t.Fatalf("heap %d -> %d with 8 MiB live", before, after)
	}
	if runtime.GOOS == "linux" && RSS() <= 0 {
		t.Fatal("no RSS on linux")
	}
}
